package main

import (
	"context"
	"fmt"

	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
)

// listenerMismatch tells a broker's listener that speaks TLS from one that
// does not, when the client speaks the other: the broker closes such a
// connection at once, which looks like a broker that stopped, and no wait
// mends it. It asks the first bootstrap broker that accepts a connection
// the other way: a TLS handshake (certificates unchecked: only whether it
// speaks TLS matters) when tlsOn is false, a plain metadata request when
// it is true. It returns nil when the other way fails too.
func (f *clusterFlags) listenerMismatch(ctx context.Context, tlsOn bool) error {
	for _, addr := range f.brokers {
		pctx, cancel := context.WithTimeout(ctx, tlsProbeTimeout)
		other := kafka.SpeaksOtherwise(pctx, addr, tlsOn, tlsProbeTimeout)
		cancel()
		if !other {
			continue
		}
		if tlsOn {
			return fmt.Errorf("kafka at %s does not speak TLS: it answered a plain request; drop --kafka-tls (and "+
				"--kafka-cacert, --kafka-cert), or point --brokers at the brokers' TLS listener (SSL or SASL_SSL)", addr)
		}
		return fmt.Errorf("kafka at %s speaks TLS: it closed a plain connection and completed a TLS handshake; add "+
			"--kafka-tls (with --kafka-cacert if a private CA signed its certificate), or point --brokers at a "+
			"PLAINTEXT or SASL_PLAINTEXT listener", addr)
	}
	return nil
}
