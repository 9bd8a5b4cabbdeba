package replica

// Formats: how keys and values are encoded in Kafka, and the Schema
// Registry the registry formats read their schemas from.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/offsetkeeper/offsetkeeper/internal/enum"
	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// Formats says how a topic's keys and values are encoded. The zero value
// reads both as JSON: the bytes pass through to the sink as they are.
type Formats struct {
	// Key and Value are sinks.JSON (the default: the bytes as they are,
	// which sinks store as JSON when they are JSON), sinks.Bytes (opaque
	// bytes, never read as JSON), or one of the Schema Registry formats in
	// Confluent's wire format, sinks.Avro, sinks.Protobuf and
	// sinks.JSONSchema (Kafka Connect's AvroConverter, ProtobufConverter
	// and JsonSchemaConverter), which the replica decodes into the JSON
	// they stand for before the sink sees them (see sinks.Record).
	Key, Value sinks.Format
	// Registry is where the registry formats read their schemas; its URL
	// is required when Key or Value is one of them.
	Registry SchemaRegistry
	// OnDecodeError is what happens to a record that cannot be decoded.
	// Default DeadLetter.
	OnDecodeError DecodeErrorPolicy
}

// SchemaRegistry is a Confluent-compatible Schema Registry
// (schema.registry.url and its basic.auth settings).
type SchemaRegistry struct {
	// URL is the registry's base URL, http:// or https://; a
	// comma-separated list is tried in order.
	URL string
	// TLS for an https URL; nil: the system's CAs.
	TLS *tls.Config
	// Username and Password are sent as HTTP basic auth when Username is
	// set (basic.auth.user.info).
	Username, Password string
	// Timeout bounds each request. Default 10s. A record whose schema the
	// registry does not give in time is not lost: its block rolls back
	// and is read again.
	Timeout time.Duration
	// CacheSize is how many schemas are kept, compiled, per format; each
	// is fetched once, on the first record that names it. Default 1000.
	CacheSize int
}

// DecodeErrorPolicy is what happens to a record whose key or value cannot
// be decoded: a wrong magic byte, a schema id the registry does not know,
// bytes that do not match their schema.
type DecodeErrorPolicy int

func (d DecodeErrorPolicy) String() string { return enum.Name[decodeErrorPolicies](int(d)) }
func (d DecodeErrorPolicy) Check() error   { return enum.Valid[decodeErrorPolicies](int(d)) }
func (d DecodeErrorPolicy) MarshalText() ([]byte, error) {
	return enum.Text[decodeErrorPolicies](int(d))
}
func (d *DecodeErrorPolicy) UnmarshalText(b []byte) error {
	return enum.SetInt[decodeErrorPolicies]((*int)(d), string(b))
}
func (d *DecodeErrorPolicy) Set(s string) error {
	return enum.SetInt[decodeErrorPolicies]((*int)(d), s)
}
func (DecodeErrorPolicy) Type() string { return enum.Type[decodeErrorPolicies]() }

const (
	// DeadLetter hands the record, with the reason, to a sink that keeps
	// a dead-letter table (a sinks.DeadLetterer); with any other sink it
	// is Stop.
	DeadLetter DecodeErrorPolicy = iota
	// Stop holds the partition at the record: its block is not written,
	// and the error, naming topic, partition, offset and cause, is logged
	// and retried until an operator acts (a reset past it, the schema
	// registered, or Skip).
	Stop
	// Skip leaves the record out of its block, counted
	// (Stats.DecodeSkipped) and logged; its offset is committed with the
	// block.
	Skip
)

type decodeErrorPolicies struct{}

func (decodeErrorPolicies) Enum() (string, []string) {
	return "decode error policy", []string{"dead-letter", "stop", "skip"}
}

// FormatNames lists the formats Formats.Key and Formats.Value accept.
var FormatNames = []sinks.Format{sinks.JSON, sinks.Bytes, sinks.Avro, sinks.Protobuf, sinks.JSONSchema}

// ParseFormat parses a format's name (space trimmed, case folded).
func ParseFormat(s string) (sinks.Format, error) {
	f := sinks.Format(strings.ToLower(strings.TrimSpace(s)))
	if f == "" {
		return sinks.JSON, nil
	}
	for _, known := range FormatNames {
		if f == known {
			return f, nil
		}
	}
	return "", fmt.Errorf("format %q: want %s", s, formatList())
}

func formatList() string {
	names := make([]string, len(FormatNames))
	for i, f := range FormatNames {
		names[i] = string(f)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func (f Formats) withDefaults() Formats {
	orDefault(&f.Key, sinks.JSON)
	orDefault(&f.Value, sinks.JSON)
	orDefault(&f.Registry.Timeout, 10*time.Second)
	orDefault(&f.Registry.CacheSize, 1000)
	return f
}

func (f Formats) validate() error {
	var errs []error
	for _, c := range []struct {
		what string
		f    sinks.Format
	}{{"key", f.Key}, {"value", f.Value}} {
		if _, err := ParseFormat(string(c.f)); err != nil {
			errs = append(errs, fmt.Errorf("%s %w", c.what, err))
		}
	}
	if err := f.OnDecodeError.Check(); err != nil {
		errs = append(errs, err)
	}
	needs := f.Key.Registered() || f.Value.Registered()
	switch {
	case needs && f.Registry.URL == "":
		errs = append(errs, fmt.Errorf("formats key %s, value %s read schemas from a Schema Registry: want its URL", f.Key, f.Value))
	case f.Registry.URL != "":
		if err := f.Registry.client().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if f.Registry.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("schema registry cache size %d: want 1 or more", f.Registry.CacheSize))
	}
	return errors.Join(errs...)
}

// client is the registry client's configuration of r.
func (r SchemaRegistry) client() registry.Config {
	return registry.Config{URL: r.URL, TLS: r.TLS, Username: r.Username, Password: r.Password, Timeout: r.Timeout}
}
