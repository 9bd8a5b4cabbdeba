package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	// httpShutdownTimeout bounds the graceful stop of the HTTP server.
	httpShutdownTimeout = 5 * time.Second
	// mirrorFlushTimeout bounds the last copy of the offsets to Kafka at
	// shutdown.
	mirrorFlushTimeout = 5 * time.Second
)

// runOpsFlags are the operational flags of `run`: the HTTP endpoints and the
// offset mirror.
type runOpsFlags struct {
	httpAddr       string
	pprof          bool
	mirrorOffsets  bool
	mirrorInterval time.Duration
}

func (f *runOpsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.httpAddr, "http-addr", defaultHTTPAddr,
		"serve /metrics, /healthz and /readyz on this host:port (port 0 picks a free one; empty disables); the bound address is advertised in the member key")
	fs.BoolVar(&f.pprof, "pprof", false,
		"serve Go's profiles under /debug/pprof/ on --http-addr even when it listens beyond loopback (on 127.0.0.1 or ::1 they are served anyway): a heap profile holds records and credentials, so only where operators alone can reach")
	fs.BoolVar(&f.mirrorOffsets, "mirror-offsets", true,
		"also commit the group's offsets to Kafka, for kafka-consumer-groups.sh, Burrow and lag exporters (informational: etcd stays the truth)")
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
	if f.mirrorInterval <= 0 {
		return usagef("--mirror-interval %s: want a positive duration, e.g. %s", f.mirrorInterval, replica.DefaultMirrorInterval)
	}
	return nil
}

// runOps runs the HTTP endpoints and the offset mirror of one replica. Its
// zero parts are disabled ones; every method is safe on them.
type runOps struct {
	flags runOpsFlags
	log   *zap.Logger

	ln     net.Listener // nil: HTTP disabled
	srv    *http.Server
	served chan struct{} // closed when Serve has returned

	mirror     *replica.Mirror
	stopMirror context.CancelFunc
	mirrored   sync.WaitGroup
}

// listen binds the HTTP address, before the replica is made, so that the
// member key can carry the bound address.
func (f runOpsFlags) listen(log *zap.Logger) (*runOps, error) {
	o := &runOps{flags: f, log: log}
	if f.httpAddr == "" {
		return o, nil
	}
	ln, err := net.Listen("tcp", f.httpAddr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("--http-addr %s: the address is in use, by another process (a second replica on this host?): "+
			"give each replica an --http-addr of its own, such as :9465, or --http-addr '' to serve no endpoint: %w", f.httpAddr, err)
	}
	if err != nil {
		return nil, fmt.Errorf("--http-addr %s: %w", f.httpAddr, err)
	}
	o.ln = ln
	return o, nil
}

// profiles tells whether /debug/pprof/ is served: when --pprof asks, or
// when the endpoints listen on loopback alone, where only this host's users
// reach them.
func (o *runOps) profiles() bool {
	if o.flags.pprof {
		return true
	}
	if o.ln == nil {
		return false
	}
	host, _, err := net.SplitHostPort(o.ln.Addr().String())
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

// advertised is the address other hosts reach the endpoints at: the bound
// address, with this host's name when bound to every interface. Empty when
// HTTP is disabled.
func (o *runOps) advertised() string {
	if o.ln == nil {
		return ""
	}
	host, port, err := net.SplitHostPort(o.ln.Addr().String())
	if err != nil {
		return o.ln.Addr().String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

// start serves the endpoints of r and starts the mirror, until stop. ctx is
// the replica's: when it ends the mirror's periodic copy stops, and stop
// copies the final offsets.
func (o *runOps) start(ctx context.Context, r *replica.Replica) {
	if o.flags.mirrorOffsets {
		o.mirror = replica.NewMirror(r, replica.WithMirrorInterval(o.flags.mirrorInterval))
		mctx, cancel := context.WithCancel(ctx)
		o.stopMirror = cancel
		o.mirrored.Add(1)
		go func() {
			defer o.mirrored.Done()
			o.mirror.Run(mctx)
		}()
	}
	if o.ln == nil {
		return
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		metrics.NewCollector(r, metrics.WithMirror(o.mirror)),
	)
	var opts []metrics.HandlerOption
	if o.profiles() {
		opts = append(opts, metrics.WithProfiles())
	}
	o.srv = &http.Server{
		Handler:           metrics.Handler(r, reg, opts...),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          zap.NewStdLog(o.log.Named("http")),
	}
	o.served = make(chan struct{})
	go func() {
		defer close(o.served)
		if err := o.srv.Serve(o.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.log.Error("serving http stopped", zap.String("address", o.ln.Addr().String()), zap.Error(err))
		}
	}()
	o.log.Info("serving http", zap.String("address", o.ln.Addr().String()), zap.Bool("mirror_offsets", o.flags.mirrorOffsets),
		zap.Bool("profiles", o.profiles()))
}

// stop runs after the replica's Run returned: it copies the final offsets
// to Kafka, then shuts the HTTP server down gracefully (requests in flight
// finish, within httpShutdownTimeout).
func (o *runOps) stop() {
	if o.mirror != nil {
		o.stopMirror()
		o.mirrored.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), mirrorFlushTimeout)
		_ = o.mirror.Flush(ctx) // counted and logged by the mirror
		cancel()
		_ = o.mirror.Close()
	}
	if o.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		if err := o.srv.Shutdown(ctx); err != nil {
			o.log.Warn("http shutdown cut requests short", zap.Error(err))
		}
		cancel()
		<-o.served
	} else if o.ln != nil {
		_ = o.ln.Close()
	}
}
