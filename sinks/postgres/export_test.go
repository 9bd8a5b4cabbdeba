package postgres

import "time"

// SetRecheck changes how long s trusts a schema whose fields the table
// lacks, so that a test need not wait recheckAfter.
func SetRecheck(s *Sink, d time.Duration) {
	s.schemaMu.Lock()
	defer s.schemaMu.Unlock()
	s.recheck = d
}
