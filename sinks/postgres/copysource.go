package postgres

import (
	"fmt"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// runSource is what the COPY sources of a run share: the run, the row
// being fed (reused: pgx encodes each row before it asks for the next) and
// the error that stopped it.
type runSource struct {
	r   *run
	i   int
	row []any
	err error
}

func (r *runSource) Next() bool {
	r.i++
	return r.i <= r.r.len() && r.err == nil
}

func (r *runSource) Err() error { return r.err }

// headed returns the current record, its block and its headers encoded;
// its error stops the source.
func (r *runSource) headed() (*blockWrite, *sinks.Record, []byte, error) {
	w, rec := r.r.at(r.i - 1)
	h, err := encodeHeaders(rec.Headers)
	if err != nil {
		r.err = fmt.Errorf("%s offset %d: %w", w.b, rec.Offset, err)
		return nil, nil, nil, r.err
	}
	return w, rec, h, nil
}

// rawSource feeds the raw table's COPY. Its error, and stageRawSource's,
// fails the whole call; encodeHeaders, the one step that returns errors,
// encodes strings only and has no input it refuses.
type rawSource struct{ runSource }

func (r *rawSource) Values() ([]any, error) {
	w, rec, h, err := r.headed()
	if err != nil {
		return nil, err
	}
	r.row[0], r.row[1], r.row[2], r.row[3] = w.b.Topic, int32(w.b.Partition), rec.Offset, kafkaKey(rec)
	r.row[4], r.row[5], r.row[6], r.row[7] = rawJSONB(rec), kafkaValue(rec), rec.Time, h
	return r.row, nil
}

// stageRawSource feeds the raw staging table; value is the text jsonb is
// made from, when the value is JSON.
type stageRawSource struct{ runSource }

func (r *stageRawSource) Values() ([]any, error) {
	w, rec, h, err := r.headed()
	if err != nil {
		return nil, err
	}
	var text any
	if v := rawJSONB(rec); v != nil {
		text = v
	}
	r.row[0], r.row[1], r.row[2], r.row[3], r.row[4] = int32(r.i-1), w.b.Topic, int32(w.b.Partition), rec.Offset, kafkaKey(rec)
	r.row[5], r.row[6], r.row[7], r.row[8] = text, kafkaValue(rec), rec.Time, h
	return r.row, nil
}

// stageColsSource feeds the columns staging table with the records that
// columns kept, and their values as rowValue made them; it has no error
// of its own.
type stageColsSource struct{ runSource }

func (r *stageColsSource) Values() ([]any, error) {
	w, j := r.r.index(r.i - 1)
	rec := &w.recs[j]
	r.row[0], r.row[1], r.row[2], r.row[3] = int32(r.i-1), w.b.Topic, int32(w.b.Partition), rec.Offset
	r.row[4], r.row[5], r.row[6] = kafkaKey(rec), rec.Time, w.vals[j]
	return r.row, nil
}
