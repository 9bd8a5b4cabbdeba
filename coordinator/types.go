package coordinator

import (
	"fmt"
	"time"
)

// Member is the value of P/members/<id>: who a replica is and where its HTTP
// endpoints listen.
type Member struct {
	ID        string    `json:"id"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	HTTPAddr  string    `json:"http_address,omitempty"`
	// Sink identifies the sink the member writes to: its scheme and
	// location, never a secret. The members of a group name the same.
	Sink string `json:"sink,omitempty"`
	// Topics are the topics the member reads. The members of a group
	// name the same.
	Topics []string `json:"topics,omitempty"`
	// TopicsRegex is the pattern the member reads the topics matching,
	// besides Topics; empty when it has none. The members of a group name
	// the same.
	TopicsRegex string `json:"topics_regex,omitempty"`
	// Draining is set by an operator (`replicas drain`): the plan gives the
	// member no partitions, so it hands its claims over at block
	// boundaries. It lasts as long as the member key.
	Draining bool `json:"draining,omitempty"`
	// Unreadable says why the member cannot read its topics from Kafka
	// (no broker answers, fetches fail); empty when it reads them. The
	// plan gives partitions only to members that read, while any does.
	Unreadable string `json:"unreadable,omitempty"`

	// Revision is the member key's CreateRevision: the join order used by
	// Plan. Not stored in the value.
	Revision int64 `json:"-"`
	// Lease is the lease the key is bound to. Not stored in the value.
	Lease int64 `json:"-"`
}

// Reads reports whether the member can read its topics from Kafka.
func (m Member) Reads() bool { return m.Unreadable == "" }

// Offsets is the value of P/offsets/<topic>/<partition>.
type Offsets struct {
	Next       int64     `json:"next"`
	Epoch      int64     `json:"epoch"`
	Replica    string    `json:"replica"`
	At         time.Time `json:"at"`
	Rows       int64     `json:"rows"`
	Generation int64     `json:"generation"`
	// TopicID is the id the topic had when the offset was committed
	// (Kafka 2.8 and later): a topic deleted and created again under
	// the same name has another, and its offsets start anew. Empty when
	// unknown, and after an operator's reset.
	TopicID string `json:"topic_id,omitempty"`
	// LeaderEpoch is the Kafka leader epoch of the record before Next, as
	// its batch carried it: a new owner asks the partition's leader
	// whether its log still holds that record (KIP-320), and a log
	// truncated below Next is read again from where it diverges. Nil when
	// unknown (offsets committed before it was stored, an operator's
	// reset, records of an old format).
	LeaderEpoch *int32 `json:"leader_epoch,omitempty"`
	// Truncated is set when this generation began because Kafka truncated
	// the partition's log below what had been read (an unclean leader
	// election): the sink's records of older generations from Truncated.At
	// on are not Kafka's any more. Kept by the generation's commits; nil
	// otherwise.
	Truncated *Truncation `json:"truncated,omitempty"`

	// ModRevision is the key's ModRevision, the condition of the next
	// fenced commit. Zero when the key does not exist. Not stored.
	ModRevision int64 `json:"-"`
}

// Truncation records where Kafka's log of a partition diverged from what a
// replica had read: At is the first offset of the new log read again, Was
// past the highest offset read before, Committed the offset that had been
// committed. Records in [At, Committed) had been committed and are gone
// from Kafka; they stay in the sink, apart from the new generation's.
type Truncation struct {
	At        int64     `json:"at"`
	Was       int64     `json:"was"`
	Committed int64     `json:"committed"`
	When      time.Time `json:"when"`
}

// Lost is how many committed offsets Kafka no longer holds.
func (t *Truncation) Lost() int64 { return max(0, t.Committed-t.At) }

// Intent is the value of P/intents/<topic>/<partition>: the block being
// written now, [From, Next), by the owner of Epoch. Round, for a sink that
// stores the blocks of a round together (sinks.RoundInserter), names the
// round the block went in with: a new owner's replay of the block, and the
// owner's own retry, carry it again.
type Intent struct {
	From  int64  `json:"from"`
	Next  int64  `json:"next"`
	Epoch int64  `json:"epoch"`
	Round string `json:"round,omitempty"`
}

func (i Intent) String() string { return fmt.Sprintf("[%d, %d)@%d", i.From, i.Next, i.Epoch) }

// ReleaseRequest is the value of P/release/<topic>/<partition>: an
// operator's request that the owner of the claim with Epoch finish its block
// and release the partition, so that the planned replica takes it.
type ReleaseRequest struct {
	Epoch int64     `json:"epoch"`
	At    time.Time `json:"at"`
}
