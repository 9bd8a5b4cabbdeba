package coordinator

import (
	"errors"
	"fmt"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

var (
	// ErrFenced means the claim is gone or belongs to a newer epoch: the
	// partition is lost. Stop it and roll back; never retry.
	ErrFenced = errors.New("claim fenced: the partition belongs to another owner or epoch")

	// ErrLeaseLost means the session could not show its lease alive (no
	// keepalive succeeded for TTL/2). Errors carrying it also match ErrFenced.
	ErrLeaseLost = errors.New("lease not shown alive")

	// ErrOffsetsChanged means someone else (an operator's reset) wrote the
	// offsets since the claim read them. Roll back, seek to Claim.Offsets().Next
	// and go on.
	ErrOffsetsChanged = errors.New("offsets changed by someone else")

	// ErrClaimed means another replica holds the claim.
	ErrClaimed = errors.New("partition already claimed")

	// ErrMemberExists means a live member with the same replica ID is
	// registered in the group.
	ErrMemberExists = errors.New("replica id already registered")

	// ErrReleased is returned by a claim's methods after Release.
	ErrReleased = errors.New("claim released")
)

// CommitError is a commit that could not be completed after its retries: the
// block is already in the sink but its offset is not committed, so the next
// owner replays it.
type CommitError struct {
	Partition sinks.Partition
	Next      int64
	Attempts  int
	Err       error
}

func (e *CommitError) Error() string {
	return fmt.Sprintf("commit %s at %d failed after %d attempts: the block is already in the sink but its offset is not committed: %v",
		e.Partition, e.Next, e.Attempts, e.Err)
}

func (e *CommitError) Unwrap() error { return e.Err }

// leaseLost is returned where a session is not alive: it matches both
// ErrLeaseLost and ErrFenced, so callers that only stop on ErrFenced stop.
func leaseLost(what string) error {
	return fmt.Errorf("%s: %w: %w", what, ErrFenced, ErrLeaseLost)
}
