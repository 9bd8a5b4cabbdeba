package kafkaconf

import "github.com/offsetkeeper/offsetkeeper/internal/enum"

// StartPolicy says where a partition is read from when it has no stored
// offset, and where reading resumes when the stored offset is out of range.
type StartPolicy int

func (p StartPolicy) String() string               { return enum.Name[startPolicies](int(p)) }
func (p StartPolicy) Check() error                 { return enum.Valid[startPolicies](int(p)) }
func (p StartPolicy) MarshalText() ([]byte, error) { return enum.Text[startPolicies](int(p)) }
func (p *StartPolicy) UnmarshalText(b []byte) error {
	return enum.SetInt[startPolicies]((*int)(p), string(b))
}
func (p *StartPolicy) Set(s string) error { return enum.SetInt[startPolicies]((*int)(p), s) }
func (StartPolicy) Type() string          { return enum.Type[startPolicies]() }

const (
	// StartEarliest starts at the log start offset: nothing still in Kafka
	// is skipped. It is the zero value.
	StartEarliest StartPolicy = iota
	// StartLatest starts at the log end: only records produced from then on
	// are read (under read_committed, the last stable offset).
	StartLatest
)

type startPolicies struct{}

func (startPolicies) Enum() (string, []string) { return "start policy", []string{"earliest", "latest"} }

// IsolationLevel says which records of transactional producers are read.
type IsolationLevel int

func (i IsolationLevel) String() string               { return enum.Name[isolationLevels](int(i)) }
func (i IsolationLevel) Check() error                 { return enum.Valid[isolationLevels](int(i)) }
func (i IsolationLevel) MarshalText() ([]byte, error) { return enum.Text[isolationLevels](int(i)) }
func (i *IsolationLevel) UnmarshalText(b []byte) error {
	return enum.SetInt[isolationLevels]((*int)(i), string(b))
}
func (i *IsolationLevel) Set(s string) error { return enum.SetInt[isolationLevels]((*int)(i), s) }
func (IsolationLevel) Type() string          { return enum.Type[isolationLevels]() }

const (
	// ReadCommitted reads only committed records, up to the last stable
	// offset. It is the zero value and the default.
	ReadCommitted IsolationLevel = iota
	// ReadUncommitted reads every record up to the high watermark,
	// including records of open and aborted transactions.
	ReadUncommitted
)

type isolationLevels struct{}

func (isolationLevels) Enum() (string, []string) {
	return "isolation level", []string{"read_committed", "read_uncommitted"}
}

// SASLMechanism names a SASL mechanism Kafka brokers accept
// (sasl.enabled.mechanisms).
type SASLMechanism int

func (m SASLMechanism) String() string               { return enum.Name[saslMechanisms](int(m)) }
func (m SASLMechanism) Check() error                 { return enum.Valid[saslMechanisms](int(m)) }
func (m SASLMechanism) MarshalText() ([]byte, error) { return enum.Text[saslMechanisms](int(m)) }
func (m *SASLMechanism) UnmarshalText(b []byte) error {
	return enum.SetInt[saslMechanisms]((*int)(m), string(b))
}
func (m *SASLMechanism) Set(s string) error { return enum.SetInt[saslMechanisms]((*int)(m), s) }
func (SASLMechanism) Type() string          { return enum.Type[saslMechanisms]() }

const (
	// SASLPlain sends the user and the password as they are: use it only
	// with TLS. It is the zero value.
	SASLPlain SASLMechanism = iota
	// SASLSCRAMSHA256 is SCRAM-SHA-256: the password never crosses the
	// wire.
	SASLSCRAMSHA256
	// SASLSCRAMSHA512 is SCRAM-SHA-512.
	SASLSCRAMSHA512
)

type saslMechanisms struct{}

func (saslMechanisms) Enum() (string, []string) {
	return "sasl mechanism", []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
}
