package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// ErrConflict means the offsets changed between an operator's read and write.
var ErrConflict = errors.New("offsets changed since they were read")

// OperatorID is the replica name an operator's reset writes into the offsets.
const OperatorID = "operator"

// resetAttempts bounds how often a reset is tried again because the owner
// committed between the operator's read and write.
const resetAttempts = 20

// ResetOffsets is the operator's write of p's offsets: next, with the
// generation bumped, in one Txn conditioned on the offsets key's ModRevision
// being the one last read (0: the key must not exist). When the condition
// fails only because the partition's owner committed meanwhile (same
// generation), the key is read again and the write retried, so a group under
// load can be reset live; when another reset came in between (a newer
// generation) it returns ErrConflict, so two operators never overwrite each
// other silently. The owner then fails its next commit with
// ErrOffsetsChanged, rolls back and seeks to next; the P/resets/ key written
// alongside makes an idle owner seek at once.
func (c *Coordinator) ResetOffsets(ctx context.Context, p sinks.Partition, next int64, seen Offsets) (Offsets, error) {
	if next < 0 {
		return Offsets{}, fmt.Errorf("reset %s to %d: offset must not be negative", p, next)
	}
	key := c.keys.Offsets(p)
	generation := seen.Generation
	for range resetAttempts {
		o := Offsets{
			Next:       next,
			Epoch:      seen.Epoch,
			Replica:    OperatorID,
			At:         time.Now().UTC(),
			Generation: generation + 1,
		}
		v, err := jsonString(o)
		if err != nil {
			return Offsets{}, err
		}
		resp, err := c.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", seen.ModRevision)).
			Then(clientv3.OpPut(key, v), clientv3.OpDelete(c.keys.Intent(p)),
				clientv3.OpPut(c.keys.Reset(p), strconv.FormatInt(o.Generation, 10))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return Offsets{}, fmt.Errorf("reset %s to %d: %w", p, next, err)
		}
		if resp.Succeeded {
			o.ModRevision = resp.Header.Revision
			return o, nil
		}
		var cur Offsets
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			if cur, err = decodeOffsets(kvs[0].Value, kvs[0].ModRevision); err != nil {
				return Offsets{}, fmt.Errorf("reset %s to %d: offsets unreadable: %w", p, next, err)
			}
		}
		if cur.ModRevision == 0 || cur.Generation != generation {
			return Offsets{}, fmt.Errorf("reset %s to %d: %w (generation %d, now %d)", p, next, ErrConflict, generation, cur.Generation)
		}
		seen = cur // the owner committed; the operator's reset still stands
	}
	return Offsets{}, fmt.Errorf("reset %s to %d: the owner kept committing; %d attempts: %w", p, next, resetAttempts, ErrConflict)
}
