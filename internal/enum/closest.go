package enum

import "strings"

// Closest is the name among names nearest to s, if it is near enough to be
// what was meant: within a third of its length in edits (at least 2), or
// s is a part of it: what a refusal of s suggests ("did you mean").
func Closest(s string, names []string) string {
	best, bestD := "", 0
	s = strings.ToLower(s)
	for _, n := range names {
		d := editDistance(s, strings.ToLower(n))
		if best == "" || d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	if bestD <= max(2, len(s)/3) {
		return best
	}
	for _, n := range names {
		if len(s) >= 3 && strings.Contains(strings.ToLower(n), s) {
			return n
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
