package admin

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The plan file: --export writes it, --from-file reads it.

// ExportHeader is the first line --export prints and --from-file skips.
const ExportHeader = "topic,partition,offset"

// PlanLine is one row of a --from-file plan.
type PlanLine struct {
	Partition sinks.Partition
	Offset    int64
	Line      int // in the file, from 1
}

// ReadPlanFile reads a plan as --export prints it: CSV lines of
// topic,partition,offset, the header line optional, blank lines and lines
// starting with # ignored.
func ReadPlanFile(path string) ([]PlanLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--from-file %q: %w; want a CSV file of topic,partition,offset lines as --export prints", path, err)
	}
	defer f.Close()
	lines, err := ParsePlan(f)
	if err != nil {
		return nil, fmt.Errorf("--from-file %q: %w", path, err)
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("--from-file %q: no partitions in it; want CSV lines of topic,partition,offset as --export prints", path)
	}
	return lines, nil
}

func ParsePlan(r io.Reader) ([]PlanLine, error) {
	const want = "want topic,partition,offset (e.g. orders,0,1200) as --export prints"
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	var out []PlanLine
	seen := map[sinks.Partition]int{}
	for first := true; ; first = false {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("line %d: %v; %s", pe.StartLine, pe.Err, want)
			}
			return nil, fmt.Errorf("read: %w", err)
		}
		line, _ := cr.FieldPos(0)
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
		}
		text := strings.Join(rec, ",")
		if first && strings.EqualFold(text, ExportHeader) {
			continue
		}
		if len(rec) != 3 {
			return nil, fmt.Errorf("line %d: %q has %d fields; %s", line, text, len(rec), want)
		}
		if err := coordinator.ValidTopic(rec[0]); err != nil {
			return nil, fmt.Errorf("line %d: %q: %v; %s", line, text, err, want)
		}
		part, err := strconv.Atoi(rec[1])
		if err != nil || part < 0 {
			return nil, fmt.Errorf("line %d: %q: partition %q is not a number 0 or more; %s", line, text, rec[1], want)
		}
		off, err := strconv.ParseInt(rec[2], 10, 64)
		if err != nil || off < 0 {
			return nil, fmt.Errorf("line %d: %q: offset %q is not an integer 0 or more; %s", line, text, rec[2], want)
		}
		p := sinks.Partition{Topic: rec[0], Partition: part}
		if prev, dup := seen[p]; dup {
			return nil, fmt.Errorf("line %d: %q: %s is already on line %d; want each partition once", line, text, p, prev)
		}
		seen[p] = line
		out = append(out, PlanLine{Partition: p, Offset: off, Line: line})
	}
}

// WriteExport prints the plan as --from-file reads it.
func WriteExport(w io.Writer, rows []PlanRow) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(strings.Split(ExportHeader, ","))
	for _, r := range rows {
		_ = cw.Write([]string{r.Topic, strconv.Itoa(r.Partition), strconv.FormatInt(r.New, 10)})
	}
	cw.Flush()
	return cw.Error()
}
