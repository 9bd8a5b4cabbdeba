package replica

import (
	"strings"
	"testing"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// TestFormatsValidate: a registry format needs a registry, and a bad
// registry URL is refused naming it (without its password), by the
// registry client's own rules.
func TestFormatsValidate(t *testing.T) {
	for _, tc := range []struct {
		f    Formats
		want string // "" valid
		not  string
	}{
		{Formats{}, "", ""},
		{Formats{Value: sinks.Bytes}, "", ""},
		{Formats{Value: sinks.Avro, Registry: SchemaRegistry{URL: "http://r:8081,https://r2:8081"}}, "", ""},
		{Formats{Value: sinks.Avro}, "want its URL", ""},
		{Formats{Key: "xml"}, `format "xml"`, ""},
		{Formats{Value: sinks.Protobuf, Registry: SchemaRegistry{URL: "ftp://r:8081"}}, `"ftp://r:8081"`, ""},
		{Formats{Value: sinks.Avro, Registry: SchemaRegistry{URL: "http://u:secret@r:8081"}}, "credentials", "secret"},
		{Formats{Value: sinks.Avro, Registry: SchemaRegistry{URL: "http://r:8081", Timeout: -1}}, "timeout", ""},
		{Formats{OnDecodeError: 9}, "decode error policy", ""},
	} {
		err := tc.f.withDefaults().validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.f, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error with %q", tc.f, err, tc.want)
		case tc.not != "" && err != nil && strings.Contains(err.Error(), tc.not):
			t.Errorf("%+v: %v shows %q", tc.f, err, tc.not)
		}
	}
}
