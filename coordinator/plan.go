package coordinator

import (
	"cmp"
	"slices"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Plan returns the owner (member ID) of every partition.
//
// Every replica of a group runs Plan on the same etcd snapshot and claims
// what is planned to it, so Plan is a pure function of its inputs: the order
// of members and partitions does not matter, and neither does map iteration
// order.
//
// Balance: with P partitions and N members everyone's quota is floor(P/N),
// and the P mod N oldest members (smallest Revision, ties by ID) get one
// more. Naming who gets the extra partition, rather than capping everyone at
// ceil(P/N), is what keeps the plan reachable: with a cap, 10 partitions on
// 4 members can stall at 3,3,3,1 with no one allowed to give one up.
//
// Stickiness: a claimed partition stays with its owner if the owner is live
// and within its quota; an owner over its quota keeps its lowest partitions
// in sorted order and sheds the rest. Quotas only shrink when a member joins
// and only grow when one leaves, so a join moves partitions only to the
// joiner and a leave moves only the leaver's partitions.
//
// Free partitions (unclaimed, claimed by members that are gone, or shed) are
// dealt in sorted order, round by round like cards: round d goes, in join
// order, to every member still missing at least d partitions. A dead
// member's partitions thus spread over the survivors instead of piling up on
// one of them.
//
// claims may name members that are not in members (their partitions count as
// free) and partitions that are not in partitions (ignored). Duplicate
// members (by ID) and partitions count once. No members or no partitions
// give an empty plan.
func Plan(members []Member, partitions []sinks.Partition, claims map[sinks.Partition]string) map[sinks.Partition]string {
	order := planMemberOrder(members)
	parts := planSortedPartitions(partitions)
	plan := make(map[sinks.Partition]string, len(parts))
	n, p := len(order), len(parts)
	if n == 0 || p == 0 {
		return plan
	}

	index := make(map[string]int, n)
	quota := make([]int, n)
	for i, id := range order {
		index[id] = i
		quota[i] = p / n
		if i < p%n {
			quota[i]++
		}
	}

	// Keep live claims up to quota; walking in sorted order makes an owner
	// over quota shed its highest partitions.
	owned := make([]int, n)
	var free []sinks.Partition
	for _, part := range parts {
		if owner, ok := claims[part]; ok {
			if i, live := index[owner]; live && owned[i] < quota[i] {
				plan[part] = owner
				owned[i]++
				continue
			}
		}
		free = append(free, part)
	}

	// Deal the free partitions. The deficits add up to len(free) exactly:
	// the quotas add up to P and every kept partition counts against one.
	deficit := make([]int, n)
	most := 0
	for i := range n {
		deficit[i] = quota[i] - owned[i]
		most = max(most, deficit[i])
	}
	next := 0
	for d := most; d > 0; d-- {
		for i, id := range order {
			if deficit[i] >= d && next < len(free) {
				plan[free[next]] = id
				next++
			}
		}
	}
	return plan
}

// Diff tells member how to move from claims (the claims in etcd) to plan.
//
// claim lists the partitions planned to member that nobody claims, the ones
// a create-if-absent can take now. A partition planned to member but still
// claimed by someone else is in neither list: it becomes claimable once its
// owner releases it or the owner's lease expires.
//
// release lists the partitions member claims that plan gives to someone else
// or does not know (e.g. a partition that no longer exists).
//
// Both lists are sorted.
func Diff(plan, claims map[sinks.Partition]string, member string) (claim, release []sinks.Partition) {
	for p, owner := range plan {
		if owner != member {
			continue
		}
		if _, taken := claims[p]; !taken {
			claim = append(claim, p)
		}
	}
	for p, owner := range claims {
		if owner == member && plan[p] != member {
			release = append(release, p)
		}
	}
	slices.SortFunc(claim, sinks.Partition.Compare)
	slices.SortFunc(release, sinks.Partition.Compare)
	return claim, release
}

// planMemberOrder returns the member IDs, oldest first: by Revision, then ID.
// An ID listed more than once counts once, at its oldest position.
func planMemberOrder(members []Member) []string {
	sorted := slices.Clone(members)
	slices.SortFunc(sorted, func(a, b Member) int {
		return cmp.Or(cmp.Compare(a.Revision, b.Revision), cmp.Compare(a.ID, b.ID))
	})
	ids := make([]string, 0, len(sorted))
	seen := make(map[string]bool, len(sorted))
	for _, m := range sorted {
		if !seen[m.ID] {
			seen[m.ID] = true
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// planSortedPartitions returns partitions sorted and without duplicates.
func planSortedPartitions(partitions []sinks.Partition) []sinks.Partition {
	sorted := slices.Clone(partitions)
	slices.SortFunc(sorted, sinks.Partition.Compare)
	return slices.Compact(sorted)
}
