package stdout

import (
	"context"
	"os"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Descriptor is the stdout sink's entry in a sinks.Table: stdout:, which
// writes to Options.Out (os.Stdout when nil).
var Descriptor = &sinks.Descriptor{
	Scheme: "stdout",
	Usage:  "stdout: (JSON lines)",
	Check:  sinks.Bare,
	Open: func(_ context.Context, _ string, o sinks.Options) (sinks.Sink, error) {
		if o.Out == nil {
			return New(os.Stdout), nil
		}
		return New(o.Out), nil
	},
}
