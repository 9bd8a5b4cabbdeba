package sqlsink

import (
	"strings"
	"testing"
)

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want string // "" for a row, else a part of the reason
	}{
		{[]byte(`{"id": 1}`), ""},
		{[]byte(" \n{}"), ""},
		{nil, "tombstone"},
		{[]byte("\xff"), "invalid UTF-8"},
		{[]byte(`{"id":`), "value is not JSON"},
		{[]byte(`[1]`), "JSON array"},
		{[]byte(`42`), "JSON scalar"},
		{[]byte(`"s"`), "JSON scalar"},
	} {
		got := RowReason(tc.in)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("RowReason(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
