package coordinator

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// The etcd layout is a contract (DESIGN.md): operators, the CLI and older
// replicas rely on these exact keys.
const (
	rootPrefix = "/offsetkeeper/v1/groups/"

	membersDir = "members/"
	claimsDir  = "claims/"
	offsetsDir = "offsets/"
	intentsDir = "intents/"
	// releaseDir holds operators' release requests: an addition to the
	// contract's four kinds of keys, which it leaves unchanged.
	releaseDir = "release/"
	// resetsDir tells owners of an operator's reset at once, so an idle
	// partition seeks without waiting for its next commit to be refused.
	resetsDir = "resets/"
)

// Keys builds the etcd keys of one group.
type Keys struct {
	prefix string // "/offsetkeeper/v1/groups/<group>/"
}

// KeysFor returns the keys of group.
func KeysFor(group string) Keys { return Keys{prefix: rootPrefix + group + "/"} }

// Prefix is the group's prefix P, with a trailing slash.
func (k Keys) Prefix() string { return k.prefix }

// Member is P/members/<id>.
func (k Keys) Member(id string) string { return k.prefix + membersDir + id }

// Claim is P/claims/<topic>/<partition>.
func (k Keys) Claim(p sinks.Partition) string { return k.prefix + claimsDir + p.String() }

// Offsets is P/offsets/<topic>/<partition>.
func (k Keys) Offsets(p sinks.Partition) string { return k.prefix + offsetsDir + p.String() }

// Intent is P/intents/<topic>/<partition>.
func (k Keys) Intent(p sinks.Partition) string { return k.prefix + intentsDir + p.String() }

// Release is P/release/<topic>/<partition>.
func (k Keys) Release(p sinks.Partition) string { return k.prefix + releaseDir + p.String() }

// ReleasePrefix is P/release/.
func (k Keys) ReleasePrefix() string { return k.prefix + releaseDir }

// Reset is P/resets/<topic>/<partition>: the generation of the last reset.
func (k Keys) Reset(p sinks.Partition) string { return k.prefix + resetsDir + p.String() }

// ResetsPrefix is P/resets/.
func (k Keys) ResetsPrefix() string { return k.prefix + resetsDir }

// PartitionOf parses the partition out of a key below dirPrefix.
func PartitionOf(key, dirPrefix string) (sinks.Partition, error) { return partitionOf(key, dirPrefix) }

// MembersPrefix, ClaimsPrefix, OffsetsPrefix and IntentsPrefix list a kind.
func (k Keys) MembersPrefix() string { return k.prefix + membersDir }

// ClaimsPrefix is P/claims/.
func (k Keys) ClaimsPrefix() string { return k.prefix + claimsDir }

// OffsetsPrefix is P/offsets/.
func (k Keys) OffsetsPrefix() string { return k.prefix + offsetsDir }

// IntentsPrefix is P/intents/.
func (k Keys) IntentsPrefix() string { return k.prefix + intentsDir }

// partitionOf parses the "<topic>/<partition>" tail of a key below dirPrefix.
func partitionOf(key, dirPrefix string) (sinks.Partition, error) {
	rest, ok := strings.CutPrefix(key, dirPrefix)
	if !ok {
		return sinks.Partition{}, fmt.Errorf("key %q is not below %q", key, dirPrefix)
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return sinks.Partition{}, fmt.Errorf("key %q: want <topic>/<partition>", key)
	}
	n, err := strconv.Atoi(rest[i+1:])
	if err != nil || n < 0 {
		return sinks.Partition{}, fmt.Errorf("key %q: partition %q is not a non-negative decimal", key, rest[i+1:])
	}
	return sinks.Partition{Topic: rest[:i], Partition: n}, nil
}
