package discard

import (
	"context"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Descriptor is the discard sink's entry in a sinks.Table: discard:.
var Descriptor = &sinks.Descriptor{
	Scheme: "discard",
	Usage:  "discard: (count only)",
	Check:  sinks.Bare,
	Open:   func(context.Context, string, sinks.Options) (sinks.Sink, error) { return New(), nil },
}
