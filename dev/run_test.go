package dev_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/offsetkeeper/offsetkeeper/dev"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// lockedBuffer is a bytes.Buffer safe for the run's concurrent writers
// (progress lines, faults as they happen).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRunWithChaosEndsWithTheAudit: the cluster started through the
// package, as a test or an embedder would, not through the CLI: with
// chaos, every record produced is in the sink, the verdict is the audit's
// (each record compared with Kafka's), and the run's temporary folder is
// gone when Run returns.
func TestRunWithChaosEndsWithTheAudit(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stderr, stdout lockedBuffer
	var ready dev.Endpoints
	rep, err := dev.Run(ctx, dev.Config{
		Messages: 3000,
		Duration: 8 * time.Second,
		Chaos:    &dev.Chaos{Every: time.Second},
		Seed:     7,
		Ready:    func(e dev.Endpoints) { ready = e },
		Out:      &stdout,
		Err:      &stderr,
	})
	if err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, stderr.String())
	}
	v := rep.Verdict
	if rep.Produced != 3000 || v.Delivered != 3000 || v.Lost != 0 || v.Mismatched != 0 || v.DeadLetters != 0 || rep.Failure != "" {
		t.Fatalf("produced %d, verdict %+v, failure %q: want 3000 delivered, none lost\nstderr:\n%s", rep.Produced, v, rep.Failure, stderr.String())
	}
	if !v.Audited() || v.Compared != rep.Produced || !strings.HasPrefix(v.By, "audit of file://") {
		t.Fatalf("verdict by %q with %d records compared: want the audit of the default file sink comparing all %d", v.By, v.Compared, rep.Produced)
	}
	if len(rep.History) == 0 || rep.Seed != 7 {
		t.Fatalf("faults %v, seed %d: want faults dealt with seed 7", rep.History, rep.Seed)
	}
	// The operator's faults, dealt through the library the CLI calls
	// (admin), took effect: a reset moved an offset, a release named its
	// owner, a drain marked a replica.
	for _, re := range []string{`reset +events/\d+ from \d+ to \d+`, `release +events/\d+ \(dev-\d, epoch \d+\)`, `drain +dev-\d for .* \(draining\)`} {
		if !slices.ContainsFunc(rep.History, regexp.MustCompile(re).MatchString) {
			t.Errorf("no fault matching %q in %q", re, rep.History)
		}
	}
	if len(ready.Etcd) != 3 || len(ready.Brokers) != 1 || len(rep.Endpoints.Etcd) != 3 {
		t.Fatalf("endpoints %+v, want 3 etcd members (the leader fault) and a broker", ready)
	}
	if got, want := strings.TrimSpace(stdout.String()), rep.Line(); got != want || !strings.HasPrefix(got, "produced=3000 delivered=3000 lost=0 ") {
		t.Fatalf("stdout %q, want the report's line %q", got, want)
	}
	for _, w := range []string{"chaos:   seed 7, faults kill,zombie,leader,etcd-cut,kafka-cut,reset,release,drain, one every 1s for 8s", "\nfault ", "\nfaults:  ", "\nverdict: audit of "} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr lacks %q", w)
		}
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("%s left in the temporary folder", e.Name())
	}
	t.Logf("%s; faults %v; %s", rep.Line(), rep.History, v.By)
}

// losingSink loses the records of partition 0 while saying they are
// written.
type losingSink struct{ sinks.Sink }

func (s losingSink) Write(ctx context.Context, b *sinks.Block) error {
	if b.Partition == 0 {
		return nil
	}
	return s.Sink.Write(ctx, b)
}

// TestRunFailsOnALostRecord: a record the sink acknowledged but did not
// keep is found by the audit, and fails the run (ErrFailed), naming the
// first and the seed.
func TestRunFailsOnALostRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr lockedBuffer
	dir := t.TempDir()
	rep, err := dev.Run(ctx, dev.Config{
		Messages: 100, Replicas: 1, Partitions: 2, Seed: 3, Dir: t.TempDir(), Err: &stderr,
		Sink: dev.Sink{URL: "file://" + dir, Open: func(context.Context) (sinks.Sink, error) {
			s, err := file.New(dir)
			return losingSink{s}, err
		}},
	})
	if !errors.Is(err, dev.ErrFailed) || rep == nil {
		t.Fatalf("Run: %v, want ErrFailed\nstderr:\n%s", err, stderr.String())
	}
	if want := "50 records lost, the first events/0 at offset 0"; rep.Failure != want || !strings.Contains(err.Error(), want+" (seed 3)") {
		t.Errorf("failure %q, error %q: want %q", rep.Failure, err, want)
	}
	if !rep.Verdict.Audited() || !strings.Contains(rep.Verdict.By, "; read back: delivered=50 lost=50") {
		t.Errorf("verdict by %q, want the audit, and the sink read back", rep.Verdict.By)
	}
	if got := rep.Line(); got != "produced=100 delivered=50 lost=50 duplicates=0 mismatched=0 dead_letters=0" {
		t.Errorf("line %q", got)
	}
	if !strings.Contains(stderr.String(), "FAILED:  50 records lost") {
		t.Errorf("stderr lacks the failure:\n%s", stderr.String())
	}
}

// TestRunCountsWhatItCannotAudit: a sink of the caller's without a URL
// cannot be read back: the verdict is counted from the writes the run made
// to it, and says so.
func TestRunCountsWhatItCannotAudit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := dev.Run(ctx, dev.Config{
		Messages: 50, Replicas: 1, Partitions: 1, Dir: t.TempDir(),
		Sink: dev.Sink{Open: func(context.Context) (sinks.Sink, error) { return discard.New(), nil }},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Verdict.Audited() || rep.Verdict.By != "not audited (no sink URL to read it back by): counted from the writes dev made to the sink, not read back from it" {
		t.Errorf("verdict by %q, want not audited", rep.Verdict.By)
	}
	if got := rep.Line(); got != "produced=50 delivered=50 lost=0 duplicates=0 mismatched=n/a dead_letters=0" {
		t.Errorf("line %q", got)
	}
}

// TestRunRefusesBadConfig: a bad Config is refused before anything
// starts, naming the value and the limit.
func TestRunRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  dev.Config
		want string
	}{
		{dev.Config{}, "0 messages: want at least 1"},
		{dev.Config{Messages: 1, Replicas: 101}, "101 replicas: want 1 to 100"},
		{dev.Config{Messages: 1, Chaos: &dev.Chaos{Faults: []string{"nope"}}}, `unknown fault "nope"`},
		{dev.Config{Messages: 1, Chaos: &dev.Chaos{Every: time.Millisecond}}, "chaos every 1ms: want at least 100ms"},
		{dev.Config{Messages: 1, Duration: time.Hour}, "duration 1h0m0s: want less than the timeout 5m0s"},
		{dev.Config{Messages: 1, Group: "a/b"}, "dev: group: "},
		{dev.Config{Messages: 1, Sink: dev.Sink{URL: "file:///x"}}, "sink file:///x: no Open"},
	} {
		_, err := dev.Run(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
