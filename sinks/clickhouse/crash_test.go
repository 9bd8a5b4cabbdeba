package clickhouse_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// killAtRename attaches strace to the ClickHouse server and has it
// SIGKILLed when it renames the temporary part dir into place: after it
// recorded the part's block id in the table's deduplication log, before
// the part joins the table (MergeTreeDeduplicationLog::addPart, then the
// rename of renameTempPartAndAdd). It returns once strace is attached, and
// a function that waits for strace to end.
func killAtRename(t *testing.T, chs *harness.ClickHouse, dir string) (wait func() string) {
	t.Helper()
	if _, err := exec.LookPath("strace"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("strace is missing: %v (test.sh installs it)", err)
		}
		t.Skipf("strace is missing: %v", err)
	}
	var out bytes.Buffer
	var mu sync.Mutex
	cmd := exec.Command("strace", "-f", "-qq", "-p", strconv.Itoa(chs.PID()),
		"-e", "trace=rename,renameat,renameat2", "-P", dir+"/",
		"-e", "inject=rename,renameat,renameat2:signal=KILL")
	cmd.Stdout, cmd.Stderr = &lockedWriter{w: &out, mu: &mu}, &lockedWriter{w: &out, mu: &mu}
	// -qq says nothing of attaching: wait for the tracee's state to say.
	if err := cmd.Start(); err != nil {
		t.Fatalf("strace: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	// Attached to every thread: the one that inserts may be any.
	harness.Await(t, 20*time.Second, "strace attached to every thread of ClickHouse", func() bool {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", chs.PID()))
		if err != nil || len(tasks) == 0 {
			return false
		}
		for _, st := range tasks {
			b, err := os.ReadFile(st)
			if err != nil || bytes.Contains(b, []byte("TracerPid:\t0\n")) {
				return false
			}
		}
		return true
	})
	return func() string {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("strace did not end: ClickHouse was not killed at the rename of %s:\n%s", dir, out.String())
		}
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// tableDir is where the table keeps its parts.
func tableDir(t *testing.T, chs *harness.ClickHouse, table string) string {
	t.Helper()
	rows := chs.Query(t, `SELECT data_paths[1] FROM system.tables WHERE database = currentDatabase() AND name = ?`, table)
	if len(rows) != 1 {
		t.Fatalf("no data path of %s", table)
	}
	return strings.TrimSuffix(fmt.Sprint(rows[0][0]), "/")
}

// The real state of a crash between an insert's deduplication record and
// its part, made by a SIGKILL at the part's rename (strace), for each table
// shape the sink checks: a table partitioned by day, whose insert of a block
// of two days is two parts and the kill lands between them; and engines
// whose merges fold rows but whose sorting key keeps every offset apart.
// ClickHouse is started again while the sink retries the insert with its
// token, which the server then drops as a duplicate. The sink finds the
// offsets missing, inserts them alone under a token of their own, and the
// table holds every offset once.
func TestCrashBetweenBlockIDAndPartLosesNothing(t *testing.T) {
	for _, tt := range []struct {
		name, engine, partition string
		part                    string // the temporary part whose rename is killed
	}{
		{"partitioned by day", "MergeTree", "PARTITION BY toYYYYMMDD(kafka_timestamp)", "tmp_insert_20240502_2_2_0"},
		// These engines' inserts are parts of level 1: merged as they are written.
		{"ReplacingMergeTree keyed by offset", "ReplacingMergeTree", "", "tmp_insert_all_1_1_1"},
		{"CollapsingMergeTree keyed by offset", "CollapsingMergeTree(sign)", "", "tmp_insert_all_1_1_1"},
		{"partitioned ReplacingMergeTree", "ReplacingMergeTree", "PARTITION BY toYYYYMMDD(kafka_timestamp)", "tmp_insert_20240502_2_2_1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			chs := harness.StartClickHouse(t)
			url, n := sinkURL(chs, "retry_timeout=60s")
			table := fmt.Sprintf("rows_%d", n)
			chs.Exec(t, `CREATE TABLE `+table+` (
				kafka_topic LowCardinality(String), kafka_partition Int32, kafka_offset Int64, kafka_generation Int64,
				kafka_key Nullable(String), kafka_timestamp DateTime64(3, 'UTC'), value Nullable(String),
				header_keys Array(String), header_values Array(Nullable(String)), sign Int8 DEFAULT 1
			) ENGINE = `+tt.engine+` `+tt.partition+` ORDER BY (kafka_topic, kafka_partition, kafka_offset)
			SETTINGS non_replicated_deduplication_window = 1000`)
			s := open(t, url)
			// Six records: three on 2024-05-01, three on 2024-05-02.
			b := &sinks.Block{Topic: "orders", Partition: 0, Epoch: 1, From: 0, Next: 6}
			day := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
			for i := range 6 {
				b.Records = append(b.Records, sinks.Record{Offset: int64(i), Key: fmt.Appendf(nil, "k%d", i),
					Value: fmt.Appendf(nil, `{"n":%d}`, i), Time: day.Add(time.Duration(i/3) * 24 * time.Hour)})
			}
			wait := killAtRename(t, chs, filepath.Join(tableDir(t, chs, table), tt.part))
			written := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				written <- s.Write(ctx, b)
			}()
			select {
			case err := <-written:
				t.Fatalf("Write returned before ClickHouse was killed: %v", err)
			case <-time.After(0):
			}
			trace := wait()
			if !strings.Contains(trace, "killed by SIGKILL") {
				t.Fatalf("ClickHouse was not killed at the rename of %s:\n%s", tt.part, trace)
			}
			harness.Await(t, 10*time.Second, "the killed ClickHouse reaped", func() bool { return chs.PID() == 0 })
			chs.Start()
			count := `SELECT count() FROM ` + table + ` WHERE kafka_topic = 'orders'`
			if err := <-written; err != nil {
				t.Fatalf("Write: %v", err)
			}
			t.Logf("strace: %s", strings.TrimSpace(trace))
			checkOnce(t, url, b)
			if tt.engine != "MergeTree" {
				// Merged as the engine merges: no offset's row folded away.
				if got := chs.QueryInt(t, `SELECT count() FROM `+table+` FINAL WHERE kafka_topic = 'orders'`); got != 6 {
					t.Errorf("%d rows read with FINAL, want 6", got)
				}
			}
			if got := chs.QueryInt(t, count); got != 6 {
				t.Errorf("%d rows, want 6", got)
			}
			if got := s.Reinserts(); got != 1 {
				t.Errorf("%d re-inserts, want 1 (the missing rows, once)", got)
			}
		})
	}
}

// The harness's count of orphan block ids (DedupOrphans) sees the state the
// crash leaves: after the kill at the second part's rename, that part's
// block id without its part (the record stays in the log, an orphan, after
// the sink inserted the missing rows under a token of their own).
func TestDedupOrphansSeeTheCrashWindow(t *testing.T) {
	chs := harness.StartClickHouse(t)
	url, n := sinkURL(chs, "retry_timeout=60s")
	table := fmt.Sprintf("rows_%d", n)
	chs.Exec(t, `CREATE TABLE `+table+` (
		kafka_topic LowCardinality(String), kafka_partition Int32, kafka_offset Int64, kafka_generation Int64,
		kafka_key Nullable(String), kafka_timestamp DateTime64(3, 'UTC'), value Nullable(String),
		header_keys Array(String), header_values Array(Nullable(String))
	) ENGINE = MergeTree PARTITION BY toYYYYMMDD(kafka_timestamp) ORDER BY (kafka_topic, kafka_partition, kafka_offset)
	SETTINGS non_replicated_deduplication_window = 1000`)
	s := open(t, url)
	b := &sinks.Block{Topic: "orders", Partition: 0, Epoch: 1, From: 0, Next: 6}
	day := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for i := range 6 {
		b.Records = append(b.Records, sinks.Record{Offset: int64(i), Value: []byte(`{}`), Time: day.Add(time.Duration(i/3) * 24 * time.Hour)})
	}
	wait := killAtRename(t, chs, filepath.Join(tableDir(t, chs, table), "tmp_insert_20240502_2_2_0"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Write(ctx, b); err == nil {
		t.Fatal("Write succeeded with ClickHouse killed under it, and retry_timeout cut short: want an error")
	}
	wait()
	harness.Await(t, 10*time.Second, "the killed ClickHouse reaped", func() bool { return chs.PID() == 0 })
	chs.Start()
	if got := chs.DedupOrphans(t, table); len(got) != 1 || !strings.HasPrefix(got[0], "20240502_2_2_0 ") {
		t.Fatalf("orphans %v, want the second part's block id alone", got)
	}
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	checkOnce(t, url, b)
}
