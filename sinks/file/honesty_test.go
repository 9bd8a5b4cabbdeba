package file_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// TestClaimDestination: the first group to claim a topic of a directory is
// recorded; another group's claim is refused, naming the directory, the
// topic, both groups and the file to remove, and records nothing, not even
// the topics that were free; with shared it records the free ones and
// leaves the first group recorded.
func TestClaimDestination(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, dir)
	ctx := context.Background()
	if err := s.ClaimDestination(ctx, "blue", []string{"orders", "payments"}, false); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if err := s.ClaimDestination(ctx, "blue", []string{"orders"}, false); err != nil {
		t.Fatalf("the same group again (a restart, another replica): %v", err)
	}
	err := s.ClaimDestination(ctx, "green", []string{"orders", "refunds"}, false)
	if !errors.Is(err, sinks.ErrDestinationClaimed) {
		t.Fatalf("another group's claim: %v, want sinks.ErrDestinationClaimed", err)
	}
	marker := filepath.Join(dir, file.GroupsDir, "orders")
	for _, want := range []string{"file://" + dir, "topic orders", `group "blue"`, `group "green"`, marker, "remove"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, file.GroupsDir, "refunds")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused claim recorded its free topic refunds: %v", err)
	}
	if err := s.ClaimDestination(ctx, "green", []string{"orders", "refunds"}, true); err != nil {
		t.Fatalf("a shared claim: %v", err)
	}
	for topic, want := range map[string]string{"orders": "blue", "payments": "blue", "refunds": "green"} {
		b, err := os.ReadFile(filepath.Join(dir, file.GroupsDir, topic))
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s recorded for %q (%v), want %q", topic, b, err, want)
		}
	}
	// Removing the file forgets the group, as the error says.
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimDestination(ctx, "green", []string{"orders"}, false); err != nil {
		t.Errorf("claim after the file was removed: %v", err)
	}
	// The markers are not blocks: readers and writers ignore them.
	write(t, s, block("orders", 0, 0, 2, "a", 0, 1))
	if recs, err := file.ReadAll(dir, "orders", 0); err != nil || len(recs) != 2 {
		t.Errorf("ReadAll beside the markers: %d records, %v", len(recs), err)
	}
}

// TestClaimDestinationRace: groups claiming one topic at once: exactly one
// wins, and every loser names it.
func TestClaimDestinationRace(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := file.New(dir) // a sink each, as replicas of different groups would have
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			errs[i] = s.ClaimDestination(context.Background(), fmt.Sprintf("g%d", i), []string{"orders"}, false)
		}()
	}
	wg.Wait()
	b, err := os.ReadFile(filepath.Join(dir, file.GroupsDir, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	winner := strings.TrimSpace(string(b))
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
			if g := fmt.Sprintf("g%d", i); g != winner {
				t.Errorf("%s's claim succeeded, but %s is recorded", g, winner)
			}
		case !errors.Is(err, sinks.ErrDestinationClaimed) || !strings.Contains(err.Error(), `"`+winner+`"`):
			t.Errorf("g%d: %v, want a refusal naming %s", i, err, winner)
		}
	}
	if won != 1 {
		t.Errorf("%d claims won, want 1", won)
	}
}

// TestDirectoryMovedAwayIsCreatedAgain: a partition's directory moved away
// while the sink runs (an archiving job) is created again at the next
// write, with one warning naming it per re-creation, and counted; the
// moved directory keeps the blocks written before, the new one those
// after, each offset in one of them; the epoch fence holds across.
func TestDirectoryMovedAwayIsCreatedAgain(t *testing.T) {
	dir, archive := t.TempDir(), t.TempDir()
	core, logs := observer.New(zapcore.WarnLevel)
	s, err := file.New(dir, file.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := block("orders", 0, 0, 10, "a", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	b.Epoch = 5
	write(t, s, b)
	write(t, s, block("orders", 1, 0, 1, "a", 0)) // another partition, which stays

	// The topic's directory goes: both partitions lose theirs.
	if err := os.Rename(filepath.Join(dir, "orders"), filepath.Join(archive, "orders")); err != nil {
		t.Fatal(err)
	}
	b = block("orders", 0, 10, 15, "b", 10, 11, 12, 13, 14)
	b.Epoch = 5
	write(t, s, b)
	if s.Recreated() != 1 {
		t.Errorf("Recreated() = %d, want 1", s.Recreated())
	}
	warns := logs.FilterMessageSnippet("created it again").All()
	if len(warns) != 1 || warns[0].ContextMap()["path"] != filepath.Join(dir, "orders", "0") {
		t.Errorf("warnings %+v, want one naming %s", warns, filepath.Join(dir, "orders", "0"))
	}
	b = block("orders", 0, 15, 16, "b", 15)
	b.Epoch = 5
	write(t, s, b)
	if s.Recreated() != 1 || logs.FilterMessageSnippet("created it again").Len() != 1 {
		t.Errorf("a write into the re-created directory counted or warned again: %d, %d", s.Recreated(), logs.Len())
	}

	old, err := file.ReadAll(archive, "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := file.ReadAll(dir, "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(old) != 10 || old[0].Offset != 0 || old[9].Offset != 9 {
		t.Errorf("the moved directory holds %d records, want offsets 0-9", len(old))
	}
	if len(cur) != 6 || cur[0].Offset != 10 || cur[5].Offset != 15 {
		t.Errorf("the new directory holds %d records, want offsets 10-15", len(cur))
	}

	// The fence starts where it was: an older epoch is still a zombie.
	z := block("orders", 0, 16, 17, "z", 16)
	z.Epoch = 4
	if err := s.Write(context.Background(), z); !errors.Is(err, sinks.ErrFenced) {
		t.Errorf("a write of epoch 4 after the directory was made again: %v, want ErrFenced", err)
	}

	// Partition 1 finds its directory gone too, at its own next write.
	write(t, s, block("orders", 1, 1, 2, "b", 1))
	if s.Recreated() != 2 {
		t.Errorf("Recreated() = %d after partition 1's write, want 2", s.Recreated())
	}
}

// TestBaseDirectoryGoneIsNotCreated: the sink's own directory gone (an
// unmounted volume) fails the write, naming it; the sink does not make it
// again, which would write to whatever lies under the mount point.
func TestBaseDirectoryGoneIsNotCreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mnt")
	s := newSink(t, dir)
	write(t, s, block("orders", 0, 0, 1, "a", 0))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	err := s.Write(context.Background(), block("orders", 0, 1, 2, "a", 1))
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Write with the base directory gone: %v, want an error naming %s", err, dir)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the base directory was made again: %v", err)
	}
	if s.Recreated() != 0 {
		t.Errorf("Recreated() = %d", s.Recreated())
	}
}
