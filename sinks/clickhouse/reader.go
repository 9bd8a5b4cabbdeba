package clickhouse

import (
	"context"
	"errors"
	"fmt"

	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// chSink reads a clickhouse:// sink's table by its kafka_offset column,
// counted (a table deduplicates blocks by their tokens within a window
// only, so an offset can be held twice), with the dead-letter table's
// offsets as held. It reads offsets only: records are not compared.
type chSink struct {
	r     *OffsetReader
	shown string
}

func openClickHouseSink(ctx context.Context, raw, shown string) (*chSink, error) {
	r, err := OpenOffsetReader(ctx, raw)
	switch {
	case errors.Is(err, ErrURL), errors.Is(err, ErrNoTable), errors.Is(err, ErrNoOffsetColumn):
		return nil, fmt.Errorf("%w: %s: %w", sinks.ErrUnreadable, shown, err)
	case err != nil:
		return nil, fmt.Errorf("audit %s: %w", shown, err)
	}
	return &chSink{r: r, shown: shown}, nil
}

func (s *chSink) Describe() string { return s.shown }

// chRecordsNote says why a ClickHouse table's records are not compared:
// sinks/clickhouse reads a table's offsets, or a whole partition's
// records at once (ReadAll), not a stream of them that the audit could
// read within bounded memory.
const chRecordsNote = "the ClickHouse reader reads offsets only: which record each offset holds is not checked"

func (s *chSink) Capabilities() sinks.Capabilities {
	return sinks.Capabilities{Missing: true, Duplicates: true, RecordsNote: chRecordsNote}
}

func (s *chSink) CheckScope(ps []sinks.Partition) error {
	return sqlsink.CheckColumnsScope(ps, s.r.HasTopic(), s.r.HasPartition(), s.shown, s.r.Table())
}

// SinkNext: the ClickHouse sink keeps intents in etcd (its replays need
// the exact range), so etcd says what is in flight.
func (s *chSink) SinkNext(context.Context, string, int) (int64, bool, error) { return 0, false, nil }

func (s *chSink) Offsets(ctx context.Context, topic string, partition int) (sinks.Stream, error) {
	rows, err := s.r.Offsets(ctx, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("audit %s: %w", s.shown, err)
	}
	return chStream{rows}, nil
}

func (s *chSink) Close() error { return s.r.Close() }

type chStream struct{ rows *OffsetRows }

func (s chStream) Next(context.Context) (sinks.Entry, bool, error) {
	off, n, ok, err := s.rows.Next()
	return sinks.Entry{Offset: off, Copies: n}, ok, err
}

func (s chStream) Close() error { return s.rows.Close() }
