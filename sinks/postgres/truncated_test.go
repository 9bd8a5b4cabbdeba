package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/sinks/postgres"
	"github.com/offsetkeeper/offsetkeeper/sinks/sinktest"
)

// TestRawTruncatedGenerationReplacesOldRows: Kafka truncated a partition's
// log at 5 after the sink stored [0, 10) (an unclean leader election), and
// the replica goes on from 5 in generation 1 (sinks.Block.Truncated). The
// new log's records at 5 to 11 go in, although the table held offsets 5 to
// 9: the old rows move to rows_N_truncated with their generation, and the
// raw table holds exactly Kafka's log. Without the flag (an operator's
// reset) the rows held are kept, as before: the new generation's records
// at held offsets are dropped.
func TestRawTruncatedGenerationReplacesOldRows(t *testing.T) {
	pg := harness.StartPostgres(t)
	url, n := sinkURL(pg, "")
	s := open(t, url)
	write(t, s, block("orders", 0, 1, 0, 10, sinktest.Seq(0, 10)...))
	// The new log: other records at 5 to 11.
	b := block("orders", 0, 2, 5, 12, sinktest.Seq(5, 12)...)
	for i := range b.Records {
		b.Records[i].Value = fmt.Appendf(nil, `{"new":%d}`, b.Records[i].Offset)
	}
	b.Generation, b.Truncated = 1, true
	write(t, s, b)
	// A second block of the generation: the normal path.
	b2 := block("orders", 0, 2, 12, 14, sinktest.Seq(12, 14)...)
	b2.Generation, b2.Truncated = 1, true
	write(t, s, b2)

	recs, err := postgres.ReadAll(context.Background(), url, "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 14 {
		t.Fatalf("%d rows, want 14 (0 to 13, each once)", len(recs))
	}
	for i, r := range recs {
		want := fmt.Sprintf(`{"n":%d}`, i)
		if i >= 5 {
			want = fmt.Sprintf(`{"new":%d}`, i)
		}
		if r.Offset != int64(i) || (i < 12 && string(r.Value) != want) {
			t.Errorf("row %d: offset %d value %s, want %d %s", i, r.Offset, r.Value, i, want)
		}
	}
	conn, err := pgx.Connect(context.Background(), pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var moved string
	if err := conn.QueryRow(context.Background(), fmt.Sprintf(
		`SELECT string_agg("offset" || ':' || generation || ':' || (value->>'n'), ' ' ORDER BY "offset") FROM rows_%d_truncated`, n)).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	if moved != "5:0:5 6:0:6 7:0:7 8:0:8 9:0:9" {
		t.Errorf("rows_%d_truncated holds %q, want the old log's 5 to 9 of generation 0", n, moved)
	}
	if next, gen, ok := resume(t, s, "orders", 0); !ok || next != 14 || gen != 1 {
		t.Errorf("Resume = %d, %d, %v; want 14, 1, true", next, gen, ok)
	}

	// An operator's reset (no Truncated): the rows held stay as they are.
	r := block("orders", 0, 2, 3, 8, sinktest.Seq(3, 8)...)
	for i := range r.Records {
		r.Records[i].Value = fmt.Appendf(nil, `{"reset":%d}`, r.Records[i].Offset)
	}
	r.Generation = 2
	write(t, s, r)
	recs, err = postgres.ReadAll(context.Background(), url, "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 14 || string(recs[3].Value) != `{"n":3}` || string(recs[6].Value) != `{"new":6}` {
		t.Errorf("after a reset: %d rows, row 3 %s, row 6 %s; want 14, the rows held kept", len(recs), recs[3].Value, recs[6].Value)
	}
}

// A sink whose user commits without waiting for the disk
// (synchronous_commit = off) says at start what a host crash can lose.
func TestAsynchronousCommitWarned(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE ROLE lazy LOGIN SUPERUSER`)
	pg.Exec(t, `ALTER ROLE lazy SET synchronous_commit = off`)
	url, _ := sinkURL(pg, "")
	url = strings.Replace(url, "postgres://postgres@", "postgres://lazy@", 1)
	core, logs := observer.New(zap.WarnLevel)
	open(t, url, postgres.WithLogger(zap.New(core)))
	if n := logs.FilterMessageSnippet("synchronous_commit = off").Len(); n != 1 {
		t.Errorf("%d warnings of synchronous_commit = off, want 1: %v", n, logs.All())
	}
}
