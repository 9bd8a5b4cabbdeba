package dev

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// everyReplica stands for every replica in expect's windows.
const everyReplica = "*"

// expect tells whether a replica's warning or error is the expected
// work of a fault dev injected itself: a paused replica loses its session,
// one cut off from etcd fails its commits. Each fault opens a window on
// the replica it touches (every replica for the etcd leader's crash), from
// its start until settle after it is undone, since the consequences (a
// lost session found on resume, a rejoin) come after the undo. Entries in
// a window are logged at INFO, with "expected" naming the fault, and
// counted; the others keep WARN or ERROR, and are counted too. A nil
// expect opens no window.
type expect struct {
	settle time.Duration

	mu      sync.Mutex
	windows map[string]*window // by replica id, or everyReplica

	expected, unexpected atomic.Int64
}

// window is one replica's: the faults on it not undone yet, and the
// end of the settling after the last undo.
type window struct {
	fault string
	open  int
	until time.Time
}

func newExpect(settle time.Duration) *expect {
	return &expect{settle: settle, windows: map[string]*window{}}
}

// begin opens a window on replica id for fault; end closes it, settle
// later.
func (e *expect) begin(id, fault string) (end func()) {
	if e == nil {
		return func() {}
	}
	e.mu.Lock()
	w := e.windows[id]
	if w == nil {
		w = &window{}
		e.windows[id] = w
	}
	w.open++
	w.fault = fault
	e.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			w.open--
			w.until = time.Now().Add(e.settle)
		})
	}
}

// during names the fault whose window replica id is in, if any.
func (e *expect) during(id string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	for _, k := range []string{id, everyReplica} {
		if w := e.windows[k]; w != nil && (w.open > 0 || now.Before(w.until)) {
			return w.fault, true
		}
	}
	return "", false
}

// counts are the warnings and errors counted so far.
func (e *expect) counts() LogCounts {
	return LogCounts{Expected: e.expected.Load(), Unexpected: e.unexpected.Load()}
}

// LogCounts are the warnings and errors the replicas of a chaos run
// logged.
type LogCounts struct {
	// Expected were logged by a replica under a fault dev injected, at
	// INFO, with "expected" naming the fault.
	Expected int64
	// Unexpected were logged as they came, at WARN or ERROR.
	Unexpected int64
}

// String is the logs: line of the report.
func (l LogCounts) String() string {
	return fmt.Sprintf("%d warnings and errors of replicas under a fault dev injected, expected: logged at INFO with \"expected\" (--log-level info shows them); %d others, logged as they came",
		l.Expected, l.Unexpected)
}

// logger is log for replica id: its warnings and errors in a window of id
// are logged at INFO.
func (e *expect) logger(log *zap.Logger, id string) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return &expectCore{Core: c, id: id, e: e} }))
}

// expectCore is expect's zap core for one replica.
type expectCore struct {
	zapcore.Core
	id string
	e  *expect
}

func (c *expectCore) With(fields []zapcore.Field) zapcore.Core {
	return &expectCore{Core: c.Core.With(fields), id: c.id, e: c.e}
}

func (c *expectCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if ent.Level != zapcore.WarnLevel && ent.Level != zapcore.ErrorLevel {
		return c.Core.Check(ent, ce)
	}
	fault, ok := c.e.during(c.id)
	if !ok {
		c.e.unexpected.Add(1)
		return c.Core.Check(ent, ce)
	}
	c.e.expected.Add(1)
	ent.Level = zapcore.InfoLevel
	if !c.Core.Enabled(ent.Level) {
		return ce
	}
	return ce.AddCore(ent, noteCore{Core: c.Core, fault: fault})
}

// noteCore writes an entry with the fault that made it expected.
type noteCore struct {
	zapcore.Core
	fault string
}

func (c noteCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	return c.Core.Write(ent, append(fields, zap.String("expected", c.fault)))
}
