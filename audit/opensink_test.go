package audit

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/builtin"
)

func TestOpenSinkRefusals(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		url  string
		want error
	}{
		{"stdout:", ErrSinkUnsupported},
		{"discard:", ErrSinkUnsupported},
		{"s3://bucket/key", ErrSinkUnsupported},
		{"file://" + filepath.Join(t.TempDir(), "nosuch"), sinks.ErrUnreadable},
	} {
		if _, err := OpenSink(ctx, builtin.Sinks(), tc.url, "g"); !errors.Is(err, tc.want) {
			t.Errorf("OpenSink(%q) = %v, want %v", tc.url, err, tc.want)
		}
	}
	_, err := OpenSink(ctx, builtin.Sinks(), "stdout:", "g")
	if want := `sink URL "stdout:" cannot be audited: want file:///DIR, postgres://… or clickhouse://…`; err == nil || err.Error() != want {
		t.Errorf("OpenSink(stdout:) = %v, want %s", err, want)
	}
}
