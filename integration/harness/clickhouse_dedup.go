package harness

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// DedupOrphans lists the entries of a non-replicated MergeTree table's
// deduplication log (non_replicated_deduplication_window) whose part no
// active part covers: block ids recorded for a part that never joined the
// table (a kill between recording it and renaming the part into place), or
// whose rows were removed since (a mutation, a dropped part). An insert
// whose token maps to an orphan is dropped as a duplicate although its
// rows are not there. Each is "part_name block_id". A table without a log
// has none.
func (c *ClickHouse) DedupOrphans(t testing.TB, table string) []string {
	t.Helper()
	rows := c.Query(t, `SELECT data_paths[1] FROM system.tables WHERE database = currentDatabase() AND name = ?`, table)
	if len(rows) != 1 {
		t.Fatalf("clickhouse: no data path of %s", table)
	}
	dir := filepath.Join(fmt.Sprint(rows[0][0]), "deduplication_logs")
	logs, _ := filepath.Glob(filepath.Join(dir, "deduplication_log_*.txt"))
	type entry struct{ part, id string }
	live := map[string]entry{} // by block id
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			t.Fatalf("clickhouse: %v", err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// "1\tPART\tBLOCK_ID" adds a block id, "2\t..." drops one.
			fs := strings.Split(sc.Text(), "\t")
			if len(fs) != 3 {
				continue
			}
			switch fs[0] {
			case "1":
				live[fs[2]] = entry{fs[1], fs[2]}
			case "2":
				delete(live, fs[2])
			}
		}
		_ = f.Close()
	}
	type span struct{ lo, hi int64 }
	active := map[string][]span{} // by partition id
	for _, r := range c.Query(t, `SELECT partition_id, min_block_number, max_block_number FROM system.parts
		WHERE database = currentDatabase() AND table = ? AND active`, table) {
		p := fmt.Sprint(r[0])
		active[p] = append(active[p], span{toInt64(r[1]), toInt64(r[2])})
	}
	var orphans []string
	for _, e := range live {
		// PARTITION_MIN_MAX_LEVEL; the partition id may hold '_'.
		fs := strings.Split(e.part, "_")
		if len(fs) < 4 {
			continue
		}
		partition := strings.Join(fs[:len(fs)-3], "_")
		lo, err1 := strconv.ParseInt(fs[len(fs)-3], 10, 64)
		hi, err2 := strconv.ParseInt(fs[len(fs)-2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		covered := false
		for _, s := range active[partition] {
			if s.lo <= lo && hi <= s.hi {
				covered = true
			}
		}
		if !covered {
			orphans = append(orphans, e.part+" "+e.id)
		}
	}
	return orphans
}

func toInt64(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case uint64:
		return int64(n)
	case int32:
		return int64(n)
	case uint32:
		return int64(n)
	}
	i, _ := strconv.ParseInt(fmt.Sprint(v), 10, 64)
	return i
}
