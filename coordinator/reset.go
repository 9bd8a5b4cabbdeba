package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrConflict means the offsets changed between an operator's read and write.
var ErrConflict = errors.New("offsets changed since they were read")

// OperatorID is the replica name an operator's reset writes into the offsets.
const OperatorID = "operator"

// ResetOffsets is the operator's write of p's offsets: next, with the
// generation bumped, in one Txn conditioned on the offsets key's ModRevision
// still being seen (0: the key must not exist). The partition's owner then
// fails its next commit with ErrOffsetsChanged, rolls back and seeks to next;
// the P/resets/ key written alongside makes an idle owner seek at once.
// It returns ErrConflict when someone wrote in between.
func (c *Coordinator) ResetOffsets(ctx context.Context, p Partition, next int64, seen Offsets) (Offsets, error) {
	if next < 0 {
		return Offsets{}, fmt.Errorf("reset %s to %d: offset must not be negative", p, next)
	}
	o := Offsets{
		Next:       next,
		Epoch:      seen.Epoch,
		Replica:    OperatorID,
		At:         time.Now().UTC(),
		Rows:       0,
		Generation: seen.Generation + 1,
	}
	v, err := jsonString(o)
	if err != nil {
		return Offsets{}, err
	}
	key := c.keys.Offsets(p)
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", seen.ModRevision)).
		Then(clientv3.OpPut(key, v), clientv3.OpDelete(c.keys.Intent(p)),
			clientv3.OpPut(c.keys.Reset(p), strconv.FormatInt(o.Generation, 10))).
		Commit()
	if err != nil {
		return Offsets{}, fmt.Errorf("reset %s to %d: %w", p, next, err)
	}
	if !resp.Succeeded {
		return Offsets{}, fmt.Errorf("reset %s to %d: %w", p, next, ErrConflict)
	}
	o.ModRevision = resp.Header.Revision
	return o, nil
}
