package main

import (
	"strconv"

	"github.com/offsetkeeper/offsetkeeper/admin"
)

// planView prints the plan, or its outcome after --execute. JSON: an
// object with the group, whether it was executed, and the partitions.
type planView struct{ *admin.Plan }

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

func (v *planView) jsonValue() any { return v.Plan }
