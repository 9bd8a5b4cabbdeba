package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
)

// Applying a plan: one fenced etcd transaction per partition.

// Statuses of an executed plan's rows.
const (
	statusReset        = "reset"
	statusConflict     = "conflict"
	statusFailed       = "failed"
	statusNotAttempted = "not-attempted"
)

// planView is the plan, or its outcome after --execute. JSON: an object
// with the group, whether it was executed, and the partitions.
type planView struct {
	Group      string    `json:"group"`
	Executed   bool      `json:"executed"`
	Partitions []planRow `json:"partitions"`
}

func (v *planView) columns() []string {
	if v.Executed {
		return []string{"TOPIC", "PARTITION", "CURRENT", "NEW", "STATUS"}
	}
	return []string{"TOPIC", "PARTITION", "CURRENT", "NEW"}
}

func (v *planView) rows() [][]string {
	out := make([][]string, len(v.Partitions))
	for i, r := range v.Partitions {
		out[i] = []string{r.Topic, strconv.Itoa(r.Partition), intCell(r.Current), strconv.FormatInt(r.New, 10)}
		if v.Executed {
			out[i] = append(out[i], r.Status)
		}
	}
	return out
}

func (v *planView) jsonValue() any { return v }

// apply writes each row by its own fenced transaction, conditioned on the
// offsets as the plan read them. A conflict does not stop the others; an
// etcd failure does, as etcd is then unlikely to answer the rest.
func (o *resetOptions) apply(ctx context.Context, coord *coordinator.Coordinator, plan *planView) error {
	plan.Executed = true
	var applied, conflicted, failed, skipped []string
	var failure error
	for i := range plan.Partitions {
		r := &plan.Partitions[i]
		if failure != nil {
			r.Status = statusNotAttempted
			skipped = append(skipped, r.p.String())
			continue
		}
		ectx, cancel := o.admin.etcdContext(ctx)
		got, err := coord.ResetOffsets(ectx, r.p, r.New, r.seen)
		cancel()
		switch {
		case err == nil:
			r.Status, r.Generation = statusReset, ptr(got.Generation)
			applied = append(applied, r.p.String())
		case errors.Is(err, coordinator.ErrConflict):
			r.Status, r.Error = statusConflict, err.Error()
			conflicted = append(conflicted, r.p.String())
		default:
			r.Status, r.Error = statusFailed, err.Error()
			failed = append(failed, r.p.String())
			failure = o.admin.etcdError(err)
		}
	}
	if len(conflicted) == 0 && failure == nil {
		return nil
	}
	var msg []string
	if len(conflicted) > 0 {
		msg = append(msg, fmt.Sprintf("not reset, offsets changed since the plan was read (a replica committed or another reset ran; run again to plan from the new state): %s",
			strings.Join(conflicted, ", ")))
	}
	if failure != nil {
		msg = append(msg, fmt.Sprintf("failed, the outcome unknown (check with offsets describe): %s: %v", strings.Join(failed, ", "), failure))
		if len(skipped) > 0 {
			msg = append(msg, "not attempted: "+strings.Join(skipped, ", "))
		}
	}
	if len(applied) > 0 {
		msg = append(msg, "reset: "+strings.Join(applied, ", "))
	} else {
		msg = append(msg, "nothing was reset")
	}
	return errors.New(strings.Join(msg, "; "))
}
