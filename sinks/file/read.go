package file

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// ReadAll returns the records stored under dir for one partition, ordered by
// offset, each offset once. It applies the package's reading rule: files in
// From order, each only up to the From of the next; temporary files of a
// crashed write and unknown names are ignored. A partition never written has
// no records and no error. Times are in UTC.
func ReadAll(dir, topic string, partition int) ([]sinks.Record, error) {
	name := partName(topic, partition)
	if err := checkTopic(topic); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if partition < 0 {
		return nil, fmt.Errorf("read %s: negative partition", name)
	}
	pdir := filepath.Join(dir, topic, strconv.Itoa(partition))
	entries, err := os.ReadDir(pdir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	type span struct {
		name       string
		from, next int64
	}
	var files []span
	for _, e := range entries {
		if from, next, ok := parseFileName(e.Name()); ok && e.Type().IsRegular() {
			files = append(files, span{e.Name(), from, next})
		}
	}
	slices.SortFunc(files, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(a.next, b.next))
	})
	var records []sinks.Record
	for i, f := range files {
		limit := f.next
		if i+1 < len(files) && files[i+1].from < limit {
			limit = files[i+1].from
		}
		if limit <= f.from {
			continue // superseded by a block with the same From
		}
		recs, err := readFile(filepath.Join(pdir, f.name), topic, partition, f.from, f.next)
		if err != nil {
			return nil, fmt.Errorf("read %s [%d, %d): %w", name, f.from, f.next, err)
		}
		for _, r := range recs {
			if r.Offset < limit {
				records = append(records, r)
			}
		}
	}
	return records, nil
}

// readFile reads one block file and checks that it belongs where it lies:
// its partition, offsets within its range and rising.
func readFile(path, topic string, partition int, from, next int64) ([]sinks.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lines, err := ReadLines(f)
	if err != nil {
		return nil, err
	}
	recs := make([]sinks.Record, 0, len(lines))
	prev := from - 1
	for _, l := range lines {
		switch {
		case l.Topic != topic || l.Partition != partition:
			return nil, fmt.Errorf("offset %d: line of %s in the wrong place", l.Record.Offset, partName(l.Topic, l.Partition))
		case l.Record.Offset < from || l.Record.Offset >= next:
			return nil, fmt.Errorf("offset %d outside the block", l.Record.Offset)
		case l.Record.Offset <= prev:
			return nil, fmt.Errorf("offset %d after %d: offsets must rise", l.Record.Offset, prev)
		}
		prev = l.Record.Offset
		recs = append(recs, l.Record)
	}
	return recs, nil
}
