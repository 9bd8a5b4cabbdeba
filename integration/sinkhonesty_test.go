package integration_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// Issue 22, rows 4, 7 and 9: what a sink's destination and server do to a
// replica, said plainly.

// committedOf is group's committed offsets of the env's topic.
func (e *env) committedOf(group string) map[int]int64 {
	e.t.Helper()
	c, err := coordinator.New(e.admin, group)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := c.Snapshot(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int]int64{}
	for p, o := range snap.Offsets {
		if p.Topic == e.topic {
			out[p.Partition] = o.Next
		}
	}
	return out
}

// etcdKeysOf counts group's keys in etcd.
func (e *env) etcdKeysOf(group string) int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.admin.Get(ctx, "/offsetkeeper/v1/groups/"+group+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Count
}

// treeOf lists the files under dir, for "nothing changed".
func treeOf(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		names = append(names, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// sharedDestination is row 4's scenario on one sink URL: group g delivers
// the topic; a second group, green, started on the same destination exits
// 2 at once, naming the destination, both groups and the opt-in, having
// written nothing (state, what the destination holds, is the same before
// and after); with --allow-shared-sink it runs and delivers.
func (e *env) sharedDestination(sinkURL string, says []string, state func() string) {
	t := e.t
	t.Helper()
	e.produce(50)
	want := perPartition(e.parts, 50)
	blue := e.processSink("g-1", sinkURL)
	await(t, 30*time.Second, "group g to deliver everything", func() bool { return e.allCommitted(want) })

	before := state()
	began := time.Now()
	green := e.processSink("green-1", sinkURL, "--group", "green")
	if code := green.Wait(20 * time.Second); code != 2 {
		t.Fatalf("green on g's destination: exit %d, want 2:\n%s", code, green.Output())
	}
	t.Logf("green refused after %s:\n%s", time.Since(began).Round(time.Millisecond), green.Output())
	out := green.Output()
	for _, want := range append([]string{`group "` + e.group + `"`, `group "green"`, "--allow-shared-sink"}, says...) {
		if !strings.Contains(out, want) {
			t.Errorf("green's error does not say %q:\n%s", want, out)
		}
	}
	if n := e.etcdKeysOf("green"); n != 0 {
		t.Errorf("green left %d keys in etcd", n)
	}
	if after := state(); after != before {
		t.Errorf("green's refused start changed the destination:\n%s\nthen:\n%s", after, before)
	}

	shared := e.processSink("green-2", sinkURL, "--group", "green", "--allow-shared-sink")
	await(t, 30*time.Second, "green, sharing on purpose, to deliver everything", func() bool {
		got := e.committedOf("green")
		for p, n := range want {
			if got[p] != n {
				return false
			}
		}
		return true
	})
	if !strings.Contains(shared.Output(), "written by another group too") {
		t.Errorf("green with --allow-shared-sink did not warn of the shared destination:\n%s", shared.Output())
	}
	for _, p := range []*harness.Process{blue, shared} {
		p.Signal(syscall.SIGTERM)
		if code := p.Wait(20 * time.Second); code != 0 {
			t.Errorf("exit %d after SIGTERM, want 0:\n%s", code, p.Output())
		}
	}
}

// TestSharedFileSinkRefused: row 4, a file directory.
func TestSharedFileSinkRefused(t *testing.T) {
	e := newEnv(t, "orders", 2)
	dir := t.TempDir()
	e.sharedDestination("file://"+dir,
		[]string{"file://" + dir, filepath.Join(dir, file.GroupsDir, e.topic)},
		func() string { return strings.Join(treeOf(t, dir), "\n") })
}

// TestSharedPostgresTableRefused: row 4, a PostgreSQL table.
func TestSharedPostgresTableRefused(t *testing.T) {
	pg := harness.StartPostgres(t)
	e := newEnv(t, "orders", 2)
	conn := pgConn(t, pg.URL())
	e.sharedDestination(pg.URL(),
		[]string{"public.offsetkeeper_records", "DELETE FROM"},
		func() string {
			var s string
			if err := conn.QueryRow(context.Background(), `SELECT format('records %s, offsets %s, groups %s',
	(SELECT count(*) FROM offsetkeeper_records),
	(SELECT string_agg("group" || ' ' || topic || '/' || partition || ' ' || next, ', ' ORDER BY 1) FROM offsetkeeper_offsets),
	(SELECT string_agg(table_name || ' ' || topic || ' ' || group_name, ', ' ORDER BY 1) FROM offsetkeeper_sink_groups))`).Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		})
}

// TestPostgresDownAtStartWaits: row 7. A replica started while its
// PostgreSQL is down (a pod restarted during a failover) does not exit: it
// waits, saying so, and once the server is back it delivers everything,
// each offset once.
func TestPostgresDownAtStartWaits(t *testing.T) {
	pg := harness.StartPostgres(t)
	e := newEnv(t, "orders", 2)
	e.produce(300)
	want := perPartition(2, 300)
	pg.Stop()
	r := e.processSink("r1", pg.URL()+"&retry_timeout=60s")
	// Six attempts logged, seconds of backoff: the replica is waiting out
	// an outage, not failing.
	began := time.Now()
	await(t, 30*time.Second, "the replica to wait for PostgreSQL", func() bool {
		return strings.Count(r.Output(), "postgres unreachable at start; retrying") >= 6 || r.Exited()
	})
	if r.Exited() {
		t.Fatalf("the replica exited while PostgreSQL was down:\n%s", r.Output())
	}
	t.Logf("the replica waited %s for PostgreSQL", time.Since(began).Round(time.Millisecond))
	pg.Start()
	await(t, 60*time.Second, "the replica to deliver everything once PostgreSQL is back", func() bool { return e.allCommitted(want) })
	e.checkExactlyOnce(pgConn(t, pg.URL()), "offsetkeeper_records", "partition", `"offset"`, want)
	r.Signal(syscall.SIGTERM)
	if code := r.Wait(20 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0:\n%s", code, r.Output())
	}
}

// TestSIGTERMWhilePostgresDownAtStart: row 8 for the PostgreSQL sink. A
// replica waiting for its PostgreSQL at start stops at once on SIGTERM,
// with a stop's exit status, 0.
func TestSIGTERMWhilePostgresDownAtStart(t *testing.T) {
	pg := harness.StartPostgres(t)
	e := newEnv(t, "orders", 1)
	pg.Stop()
	r := e.processSink("r1", pg.URL()+"&retry_timeout=60s")
	sigtermWhileDown(t, r, "PostgreSQL", "postgres unreachable at start; retrying", 20*time.Second)
	if n := e.etcdKeysOf(e.group); n != 0 {
		t.Errorf("the stopped replica left %d keys in etcd", n)
	}
}

// TestFileSinkDirectoryMovedAway: row 9. An archiving job moves the
// topic's directory away while records flow: the replica creates it again
// (a WARN names it) and goes on, no stall; the moved directory keeps the
// blocks written before, the new one the blocks after, and the two
// together hold every offset once.
func TestFileSinkDirectoryMovedAway(t *testing.T) {
	e := newEnv(t, "orders", 2)
	dir, archive := t.TempDir(), t.TempDir()
	r := e.processSink("r1", "file://"+dir)
	l := e.startLoad(2000)
	await(t, 30*time.Second, "some records delivered", func() bool {
		c := e.committed()
		return c[0] > 200 && c[1] > 200
	})
	if err := os.Rename(filepath.Join(dir, e.topic), filepath.Join(archive, e.topic)); err != nil {
		t.Fatal(err)
	}
	moved := e.committed()
	await(t, 30*time.Second, "records delivered after the move", func() bool {
		c := e.committed()
		return c[0] > moved[0]+200 && c[1] > moved[1]+200
	})
	want := l.stop(t)
	await(t, 30*time.Second, "everything delivered", func() bool { return e.allCommitted(want) })

	for p, n := range want {
		old, err := file.ReadAll(archive, e.topic, p)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := file.ReadAll(dir, e.topic, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(old) == 0 || len(cur) == 0 {
			t.Fatalf("partition %d: %d records moved away, %d in the new directory: want both", p, len(old), len(cur))
		}
		if old[len(old)-1].Offset >= cur[0].Offset {
			t.Errorf("partition %d: the moved directory reaches offset %d, the new one starts at %d: want the old before the new", p, old[len(old)-1].Offset, cur[0].Offset)
		}
		all := append(old, cur...)
		if int64(len(all)) != n {
			t.Errorf("partition %d: %d records in the two directories, want %d", p, len(all), n)
		}
		for i, rec := range all {
			if rec.Offset != int64(i) {
				t.Fatalf("partition %d: record %d has offset %d: lost or duplicated", p, i, rec.Offset)
			}
		}
	}
	out := r.Output()
	for p := range want {
		if !strings.Contains(out, filepath.Join(dir, e.topic, fmt.Sprint(p))) {
			t.Errorf("no WARN names %s:\n%s", filepath.Join(dir, e.topic, fmt.Sprint(p)), out)
		}
	}
	if n := strings.Count(out, "created it again"); n != len(want) {
		t.Errorf("%d warnings of a directory made again, want one per partition (%d):\n%s", n, len(want), out)
	}
	if _, err := os.Stat(filepath.Join(archive, e.topic)); errors.Is(err, fs.ErrNotExist) {
		t.Error("the moved directory is gone")
	}
}
