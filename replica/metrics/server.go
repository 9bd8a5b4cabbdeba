package metrics

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/offsetkeeper/offsetkeeper/replica"
)

const (
	// httpShutdownTimeout bounds the graceful stop of the HTTP server.
	httpShutdownTimeout = 5 * time.Second
	// mirrorFlushTimeout bounds the last copy of the offsets to Kafka at
	// shutdown.
	mirrorFlushTimeout = 5 * time.Second
	// StopTimeout is the most Stop takes: the last copy of the offsets,
	// then the HTTP server's graceful stop. A process's grace period at
	// shutdown must leave it this, beyond the replica's own stop.
	StopTimeout = mirrorFlushTimeout + httpShutdownTimeout
)

// EndpointsConfig says what Endpoints serve and run.
type EndpointsConfig struct {
	// Listener is where the HTTP endpoints are served; nil serves none.
	Listener net.Listener
	// Profiles serves Go's profiles under /debug/pprof/ even when
	// Listener is beyond loopback (on loopback they are served anyway).
	Profiles bool
	// Mirror also commits the group's offsets to Kafka every
	// MirrorInterval (replica.Mirror).
	Mirror         bool
	MirrorInterval time.Duration
	// PartitionLimit is WithPartitionLimit's: 0 is DefaultPartitionLimit.
	PartitionLimit int
	// Log receives the server's errors; nil for none.
	Log *zap.Logger
}

// Endpoints run a replica's HTTP endpoints (/metrics, /healthz, /readyz,
// and the profiles: Handler) and its offset mirror. Their disabled parts
// are zero; every method is safe on them.
type Endpoints struct {
	cfg    EndpointsConfig
	srv    *http.Server
	served chan struct{} // closed when Serve has returned

	mirror     *replica.Mirror
	stopMirror context.CancelFunc
	mirrored   sync.WaitGroup
}

// NewEndpoints returns the endpoints of cfg, to Start once the replica is
// made; the listener is bound before, so that the member key can carry
// the bound address (Advertised).
func NewEndpoints(cfg EndpointsConfig) *Endpoints {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	return &Endpoints{cfg: cfg}
}

// Profiles tells whether /debug/pprof/ is served: when the config asks, or
// when the endpoints listen on loopback alone, where only this host's users
// reach them.
func (o *Endpoints) Profiles() bool {
	if o.cfg.Profiles {
		return true
	}
	if o.cfg.Listener == nil {
		return false
	}
	host, _, err := net.SplitHostPort(o.cfg.Listener.Addr().String())
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

// Advertised is the address other hosts reach the endpoints at: the bound
// address, with this host's name when bound to every interface. Empty when
// HTTP is disabled.
func (o *Endpoints) Advertised() string {
	if o.cfg.Listener == nil {
		return ""
	}
	host, port, err := net.SplitHostPort(o.cfg.Listener.Addr().String())
	if err != nil {
		return o.cfg.Listener.Addr().String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

// Start serves the endpoints of r and starts the mirror, until Stop. ctx is
// the replica's: when it ends the mirror's periodic copy stops, and Stop
// copies the final offsets.
func (o *Endpoints) Start(ctx context.Context, r *replica.Replica) {
	if o.cfg.Mirror {
		o.mirror = replica.NewMirror(r, replica.WithMirrorInterval(o.cfg.MirrorInterval))
		mctx, cancel := context.WithCancel(ctx)
		o.stopMirror = cancel
		o.mirrored.Add(1)
		go func() {
			defer o.mirrored.Done()
			o.mirror.Run(mctx)
		}()
	}
	if o.cfg.Listener == nil {
		return
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		NewCollector(r, WithMirror(o.mirror), WithPartitionLimit(cmp.Or(o.cfg.PartitionLimit, DefaultPartitionLimit))),
	)
	var opts []HandlerOption
	if o.Profiles() {
		opts = append(opts, WithProfiles())
	}
	o.srv = &http.Server{
		Handler:           Handler(r, reg, opts...),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          zap.NewStdLog(o.cfg.Log.Named("http")),
	}
	o.served = make(chan struct{})
	go func() {
		defer close(o.served)
		if err := o.srv.Serve(o.cfg.Listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.cfg.Log.Error("serving http stopped", zap.String("address", o.cfg.Listener.Addr().String()), zap.Error(err))
		}
	}()
	o.cfg.Log.Info("serving http", zap.String("address", o.cfg.Listener.Addr().String()), zap.Bool("mirror_offsets", o.cfg.Mirror),
		zap.Bool("profiles", o.Profiles()))
}

// Stop runs after the replica's Run returned: it copies the final offsets
// to Kafka, then shuts the HTTP server down gracefully (requests in flight
// finish, within httpShutdownTimeout).
func (o *Endpoints) Stop() {
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
			o.cfg.Log.Warn("http shutdown cut requests short", zap.Error(err))
		}
		cancel()
		<-o.served
	} else if o.cfg.Listener != nil {
		_ = o.cfg.Listener.Close()
	}
}
