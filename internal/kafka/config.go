package kafka

import (
	kafkago "github.com/segmentio/kafka-go"

	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
)

// wireIsolation is l as Fetch and ListOffsets requests carry it.
func wireIsolation(l IsolationLevel) kafkago.IsolationLevel {
	if l == ReadUncommitted {
		return kafkago.ReadUncommitted
	}
	return kafkago.ReadCommitted
}

// The configuration is kafkaconf's, the one public one; these names keep
// this package's code as it reads. They are an internal package's aliases,
// shown in no public package's documentation.
type (
	Config         = kafkaconf.Config
	StartPolicy    = kafkaconf.StartPolicy
	IsolationLevel = kafkaconf.IsolationLevel
	SASLMechanism  = kafkaconf.SASLMechanism
	SASL           = kafkaconf.SASL
)

// The enumerations' values and the defaults, kafkaconf's.
const (
	StartEarliest   = kafkaconf.StartEarliest
	StartLatest     = kafkaconf.StartLatest
	ReadCommitted   = kafkaconf.ReadCommitted
	ReadUncommitted = kafkaconf.ReadUncommitted
	SASLPlain       = kafkaconf.SASLPlain
	SASLSCRAMSHA256 = kafkaconf.SASLSCRAMSHA256
	SASLSCRAMSHA512 = kafkaconf.SASLSCRAMSHA512

	DefaultFetchMinBytes          = kafkaconf.DefaultFetchMinBytes
	DefaultFetchMaxWait           = kafkaconf.DefaultFetchMaxWait
	DefaultFetchMaxPartitionBytes = kafkaconf.DefaultFetchMaxPartitionBytes
	DefaultFetchMaxBytes          = kafkaconf.DefaultFetchMaxBytes
	DefaultMaxBufferBytes         = kafkaconf.DefaultMaxBufferBytes
	DefaultRequestTimeout         = kafkaconf.DefaultRequestTimeout
	DefaultRetryBackoffMin        = kafkaconf.DefaultRetryBackoffMin
	DefaultRetryBackoffMax        = kafkaconf.DefaultRetryBackoffMax
	DefaultUnknownTopicTimeout    = kafkaconf.DefaultUnknownTopicTimeout
)
