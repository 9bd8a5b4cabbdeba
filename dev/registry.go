package dev

// The value formats of a run, and the embedded Schema Registry of a run
// that writes Confluent's wire format.

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

var valueFormats = []sinks.Format{sinks.JSON, sinks.Avro, sinks.Protobuf}

// ValueFormats are the formats Config.ValueFormat accepts: json (the
// default), avro and protobuf.
func ValueFormats() []sinks.Format { return append([]sinks.Format(nil), valueFormats...) }

// ParseValueFormat parses a value format's name (space trimmed, case
// folded; "" is json). Its error names the value and the formats accepted.
func ParseValueFormat(s string) (sinks.Format, error) {
	f := sinks.Format(strings.ToLower(strings.TrimSpace(s)))
	if f == "" {
		return sinks.JSON, nil
	}
	for _, known := range valueFormats {
		if f == known {
			return f, nil
		}
	}
	return "", fmt.Errorf("value format %q: want %s", s, valueFormatList())
}

func valueFormatList() string {
	names := make([]string, len(valueFormats))
	for i, f := range valueFormats {
		names[i] = string(f)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// SchemaID is the id of the one schema the embedded registry holds: the
// schema of every value a run writes in avro or protobuf.
const SchemaID = 1

// The schemas of dev's values, the JSON object {"n": N, "at": "RFC 3339
// time"}: decoded, each value is that object again, its fields in the same
// order (the Protobuf 64-bit n a JSON number).
const (
	avroSchema = `{"type":"record","name":"Event","namespace":"offsetkeeper.dev","fields":[` +
		`{"name":"n","type":"long"},{"name":"at","type":"string"}]}`
	protobufSchema = `syntax = "proto3";

package offsetkeeper.dev;

message Event {
  int64 n = 1;
  string at = 2;
}
`
)

// encoder writes the values of a run in its format. The registry formats
// are framed as Confluent's serializers frame them: the magic byte 0, the
// schema id (4 bytes, big-endian), for Protobuf the message indexes (a
// single 0, for the file's first message), then the payload.
type encoder struct {
	format sinks.Format
	avro   avro.Schema // with format avro
}

// avroEvent is a value as hamba/avro encodes it.
type avroEvent struct {
	N  int64  `avro:"n"`
	At string `avro:"at"`
}

func newEncoder(f sinks.Format) (*encoder, error) {
	e := &encoder{format: f}
	if f == sinks.Avro {
		s, err := avro.Parse(avroSchema)
		if err != nil {
			return nil, fmt.Errorf("dev: the avro schema: %w", err)
		}
		e.avro = s
	}
	return e, nil
}

// encode returns the value of record n, produced at at.
func (e *encoder) encode(n int64, at time.Time) ([]byte, error) {
	ts := at.UTC().Format(time.RFC3339Nano)
	switch e.format {
	case sinks.Avro:
		payload, err := avro.Marshal(e.avro, avroEvent{N: n, At: ts})
		if err != nil {
			return nil, fmt.Errorf("encode record %d in avro: %w", n, err)
		}
		return append(header(), payload...), nil
	case sinks.Protobuf:
		b := append(header(), 0) // the message indexes: [0], written as one 0
		if n != 0 {              // proto3: a zero scalar is not written
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(n))
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		return protowire.AppendString(b, ts), nil
	}
	return fmt.Appendf(nil, `{"n":%d,"at":%q}`, n, ts), nil
}

// header is the wire format's magic byte and SchemaID.
func header() []byte {
	return binary.BigEndian.AppendUint32([]byte{0}, SchemaID)
}

// schemaRegistry is a run's embedded Schema Registry: an HTTP server on a
// loopback port holding one schema, SchemaID, under the subject
// <topic>-value (Confluent's TopicNameStrategy). It answers what a
// Confluent-compatible client reads: GET /schemas/ids/{id}, /subjects,
// /subjects/{subject}/versions and /subjects/{subject}/versions/{version}
// (1 or latest), with Confluent's error codes; it registers nothing.
type schemaRegistry struct {
	url  string
	srv  *http.Server
	done chan struct{} // closed when Serve returns
}

// registered is the one schema, as the registry answers for it.
type registered struct {
	Subject    string `json:"subject,omitempty"`
	Version    int    `json:"version,omitempty"`
	ID         int    `json:"id,omitempty"`
	Schema     string `json:"schema"`
	SchemaType string `json:"schemaType"`
}

// startRegistry starts the registry of values of format f (avro or
// protobuf) on topic. Close stops it.
func startRegistry(topic string, f sinks.Format) (*schemaRegistry, error) {
	s := registered{Subject: topic + "-value", Version: 1, ID: SchemaID, Schema: avroSchema, SchemaType: "AVRO"}
	if f == sinks.Protobuf {
		s.Schema, s.SchemaType = protobufSchema, "PROTOBUF"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start the schema registry: %w", err)
	}
	r := &schemaRegistry{
		url:  "http://" + ln.Addr().String(),
		srv:  &http.Server{Handler: registryHandler(s), ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln) // until Close
	}()
	return r, nil
}

// Close stops the registry: its listener and connections closed, Serve
// returned.
func (r *schemaRegistry) Close() {
	_ = r.srv.Close()
	<-r.done
}

// registryHandler answers for schema s.
func registryHandler(s registered) http.Handler {
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	notFound := func(w http.ResponseWriter, code int, msg string) {
		answer(w, http.StatusNotFound, map[string]any{"error_code": code, "message": msg})
	}
	subject := func(w http.ResponseWriter, r *http.Request) bool {
		if r.PathValue("subject") != s.Subject {
			notFound(w, 40401, fmt.Sprintf("Subject '%s' not found.", r.PathValue("subject")))
			return false
		}
		return true
	}
	mux.HandleFunc("GET /schemas/ids/{id}", func(w http.ResponseWriter, r *http.Request) {
		if id, err := strconv.Atoi(r.PathValue("id")); err != nil || id != s.ID {
			notFound(w, 40403, fmt.Sprintf("Schema %s not found", r.PathValue("id")))
			return
		}
		answer(w, http.StatusOK, registered{Schema: s.Schema, SchemaType: s.SchemaType})
	})
	mux.HandleFunc("GET /subjects", func(w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusOK, []string{s.Subject})
	})
	mux.HandleFunc("GET /subjects/{subject}/versions", func(w http.ResponseWriter, r *http.Request) {
		if subject(w, r) {
			answer(w, http.StatusOK, []int{s.Version})
		}
	})
	mux.HandleFunc("GET /subjects/{subject}/versions/{version}", func(w http.ResponseWriter, r *http.Request) {
		if !subject(w, r) {
			return
		}
		if v := r.PathValue("version"); v != "latest" && v != strconv.Itoa(s.Version) {
			notFound(w, 40402, fmt.Sprintf("Version %s not found.", v))
			return
		}
		answer(w, http.StatusOK, s)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		notFound(w, 404, "HTTP 404 Not Found")
	})
	return mux
}
