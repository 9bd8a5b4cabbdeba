package audit

import (
	"fmt"
	"strings"
)

// Summary is one line: clean, or the count of each finding, then how
// many records were compared, or why none were.
func (r *Report) Summary() string {
	var missing, dup, copies, mismatched, flight, beyond, aborted, unverifiable, truncated int64
	for _, p := range r.Partitions {
		missing += p.Missing.Count
		dup += p.Duplicated.Count
		copies += p.Copies
		mismatched += p.Mismatched.Count
		flight += p.InFlight.Count
		beyond += p.BeyondCommit.Count
		aborted += p.Aborted.Count
		unverifiable += p.Unverifiable.Count
		truncated += p.TruncatedByKafka.Count
	}
	notes := []string{r.ComparedNote()}
	if flight > 0 && r.Clean() {
		notes = append(notes, fmt.Sprintf("%d offsets in flight (not findings)", flight))
	}
	if unverifiable > 0 {
		notes = append(notes, fmt.Sprintf("%d offsets below the log start unverifiable", unverifiable))
	}
	if truncated > 0 {
		notes = append(notes, fmt.Sprintf("%d committed offsets truncated by Kafka (records Kafka lost, kept in the sink; not findings)", truncated))
	}
	if !r.Capabilities.Missing {
		notes = append(notes, "missing records not checked (upsert keeps the last record of each key)")
	}
	if !r.Capabilities.Duplicates {
		notes = append(notes, "no duplicates possible (keyed by offset)")
	}
	if n := r.DeadLetters(); n > 0 {
		notes = append(notes, fmt.Sprintf("%d offsets held in the dead-letter table", n))
	}
	note := ""
	if len(notes) > 0 {
		note = "; " + strings.Join(notes, "; ")
	}
	if r.Clean() {
		return fmt.Sprintf("clean: %d partitions%s", len(r.Partitions), note)
	}
	var found []string
	if missing > 0 {
		found = append(found, fmt.Sprintf("%d missing", missing))
	}
	if dup > 0 {
		found = append(found, fmt.Sprintf("%d duplicated (%d extra copies)", dup, copies))
	}
	if mismatched > 0 {
		found = append(found, fmt.Sprintf("%d mismatched (held, but not the record Kafka holds there)", mismatched))
	}
	if flight+beyond > 0 {
		found = append(found, fmt.Sprintf("%d not committed (%d in flight, %d beyond the commit)", flight+beyond, flight, beyond))
	}
	if aborted > 0 {
		found = append(found, fmt.Sprintf("%d aborted", aborted))
	}
	return strings.Join(found, ", ") + note
}
