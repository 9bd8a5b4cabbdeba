package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/replica/metrics"
)

const (
	// defaultHTTPAddr is where `run` serves /metrics, /healthz and
	// /readyz: every interface, so Prometheus and Kubernetes probes reach
	// it at the pod's address. 9464 is the port commonly used for
	// Prometheus exporters of applications.
	defaultHTTPAddr = ":9464"
)

// runOpsFlags are the operational flags of `run`: the HTTP endpoints and the
// offset mirror.
type runOpsFlags struct {
	httpAddr       string
	pprof          bool
	mirrorOffsets  bool
	mirrorInterval time.Duration
	partitionLimit int
}

func (f *runOpsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.httpAddr, "http-addr", defaultHTTPAddr,
		"serve /metrics, /healthz and /readyz on this host:port (port 0 picks a free one; empty disables); the bound address is advertised in the member key")
	fs.BoolVar(&f.pprof, "pprof", false,
		"serve Go's profiles under /debug/pprof/ on --http-addr even when it listens beyond loopback (on 127.0.0.1 or ::1 they are served anyway): a heap profile holds records and credentials, so only where operators alone can reach")
	fs.BoolVar(&f.mirrorOffsets, "mirror-offsets", true,
		"also commit the group's offsets to Kafka, for kafka-consumer-groups.sh, Burrow and lag exporters (informational: etcd stays the truth)")
	fs.IntVar(&f.partitionLimit, "metrics-partition-limit", metrics.DefaultPartitionLimit,
		"export the per-partition series (lag, offsets, stalls) while the replica owns at most this many partitions; -1: always. The per-topic series (offsetkeeper_topic_*) are exported whatever the number")
	fs.DurationVar(&f.mirrorInterval, "mirror-interval", replica.DefaultMirrorInterval,
		"how often --mirror-offsets copies the offsets to Kafka")
}

func (f *runOpsFlags) validate() error {
	if f.httpAddr != "" {
		host, port, err := net.SplitHostPort(f.httpAddr)
		if err != nil || strings.ContainsAny(host, " /") {
			return usagef("--http-addr %q: want host:port or :port, e.g. %s, or empty to disable", f.httpAddr, defaultHTTPAddr)
		}
		if _, err := net.LookupPort("tcp", port); err != nil {
			return usagef("--http-addr %q: bad port %q: want 0 to 65535", f.httpAddr, port)
		}
	}
	if f.partitionLimit < -1 || f.partitionLimit == 0 {
		return usagef("--metrics-partition-limit %d: want 1 or more, or -1 for every partition", f.partitionLimit)
	}
	if f.mirrorInterval <= 0 {
		return usagef("--mirror-interval %s: want a positive duration, e.g. %s", f.mirrorInterval, replica.DefaultMirrorInterval)
	}
	return nil
}

// listen binds the HTTP address, before the replica is made, so that the
// member key can carry the bound address.
func (f runOpsFlags) listen(log *zap.Logger) (*metrics.Endpoints, error) {
	cfg := metrics.EndpointsConfig{Profiles: f.pprof, Mirror: f.mirrorOffsets, MirrorInterval: f.mirrorInterval, PartitionLimit: f.partitionLimit, Log: log}
	if f.httpAddr == "" {
		return metrics.NewEndpoints(cfg), nil
	}
	ln, err := net.Listen("tcp", f.httpAddr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("--http-addr %s: the address is in use, by another process (a second replica on this host?): "+
			"give each replica an --http-addr of its own, such as :9465, or --http-addr '' to serve no endpoint: %w", f.httpAddr, err)
	}
	if err != nil {
		return nil, fmt.Errorf("--http-addr %s: %w", f.httpAddr, err)
	}
	cfg.Listener = ln
	return metrics.NewEndpoints(cfg), nil
}
