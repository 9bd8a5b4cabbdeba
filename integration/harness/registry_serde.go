package harness

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The producer's side of Schema Registry formats, for tests: register
// schemas in a SchemaRegistry, and encode values as a Confluent serializer
// does (the wire format: magic byte 0, the schema id as 4 bytes big endian,
// for Protobuf the index of the message in its file, then the payload).
//
//	id := reg.RegisterAvro(t, "orders-value", orderSchema)
//	value := harness.AvroEncode(t, id, orderSchema, map[string]any{"id": 1, "item": "tea"})
//
//	fd := harness.CompileProto(t, orderProto, map[string]string{"money.proto": moneyProto})
//	mid := reg.RegisterProtobuf(t, "money", moneyProto)
//	oid := reg.RegisterProtobuf(t, "orders-value", orderProto, harness.SchemaRef{Name: "money.proto", Subject: "money", Version: 1})
//	value := harness.ProtoEncode(t, oid, fd, "shop.Order", `{"id": 1, "price": {"cents": 250}}`)
//
//	id := reg.RegisterJSON(t, "events-value", eventSchema)
//	value := harness.JSONEncode(t, id, map[string]any{"kind": "click"})

// SchemaRef is a schema's reference to another registered schema: Name is
// how the schema names it (Avro: the full name of a type the other schema
// defines; Protobuf: the import path; JSON Schema: the $ref URL), Subject
// and Version where the other schema is registered. A subject's first
// version is 1.
type SchemaRef struct {
	Name    string
	Subject string
	Version int
}

// Client is a franz-go Schema Registry client of r, with its TLS and
// credentials, for what the helpers here do not do. It is closed with r.
func (r *SchemaRegistry) Client() *sr.Client {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client != nil {
		return r.client
	}
	// A transport of its own, whose idle connections cleanup closes: the
	// tests check for leaked goroutines.
	r.transport = &http.Transport{TLSClientConfig: r.TLS()}
	opts := []sr.ClientOpt{
		sr.URLs(r.URL),
		sr.HTTPClient(&http.Client{Transport: r.transport, Timeout: srOpTimeout}),
		sr.UserAgent("offsetkeeper-harness"),
	}
	if r.Username != "" {
		opts = append(opts, sr.BasicAuth(r.Username, r.Password))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		r.t.Fatalf("schema registry: client: %v", err)
	}
	r.client = cl
	return cl
}

// Register registers a schema of type typ under subject (a new version, or
// the existing one of the same schema) and returns it with its id and
// version; it fails the test if the registry refuses it.
func (r *SchemaRegistry) Register(t testing.TB, subject string, typ sr.SchemaType, text string, refs ...SchemaRef) sr.SubjectSchema {
	t.Helper()
	s := sr.Schema{Schema: text, Type: typ}
	for _, ref := range refs {
		s.References = append(s.References, sr.SchemaReference{Name: ref.Name, Subject: ref.Subject, Version: ref.Version})
	}
	ctx, cancel := context.WithTimeout(context.Background(), srOpTimeout)
	defer cancel()
	ss, err := r.Client().CreateSchema(ctx, subject, s)
	if err != nil {
		t.Fatalf("schema registry: register %s schema under %s: %v", typ, subject, err)
	}
	return ss
}

// RegisterAvro registers an Avro schema under subject and returns its id.
func (r *SchemaRegistry) RegisterAvro(t testing.TB, subject, text string, refs ...SchemaRef) int {
	t.Helper()
	return r.Register(t, subject, sr.TypeAvro, text, refs...).ID
}

// RegisterProtobuf registers a .proto file under subject and returns its
// id; each of its imports but Google's well-known types is a reference.
func (r *SchemaRegistry) RegisterProtobuf(t testing.TB, subject, text string, refs ...SchemaRef) int {
	t.Helper()
	return r.Register(t, subject, sr.TypeProtobuf, text, refs...).ID
}

// RegisterJSON registers a JSON Schema under subject and returns its id.
func (r *SchemaRegistry) RegisterJSON(t testing.TB, subject, text string, refs ...SchemaRef) int {
	t.Helper()
	return r.Register(t, subject, sr.TypeJSON, text, refs...).ID
}

// confluent is the header of the Confluent wire format.
var confluent = new(sr.ConfluentHeader)

// AvroEncode encodes value in schema text, prefixed with the header of
// schema id. Value is what hamba/avro marshals: map[string]any for a
// record, a struct with `avro` field tags, or a plain value for a
// primitive schema. refs are the texts of the schemas whose named types the
// schema uses, each parsed before the ones after it.
func AvroEncode(t testing.TB, id int, text string, value any, refs ...string) []byte {
	t.Helper()
	cache := &avro.SchemaCache{}
	for i, ref := range refs {
		if _, err := avro.ParseWithCache(ref, "", cache); err != nil {
			t.Fatalf("avro encode: parse reference %d: %v", i, err)
		}
	}
	schema, err := avro.ParseWithCache(text, "", cache)
	if err != nil {
		t.Fatalf("avro encode: parse schema: %v", err)
	}
	b, err := sr.Encode(value, confluent, id, nil, func(v any) ([]byte, error) { return avro.Marshal(schema, v) })
	if err != nil {
		t.Fatalf("avro encode: %v", err)
	}
	return b
}

// ProtoMain is the path that CompileProto gives the file it compiles.
const ProtoMain = "main.proto"

// CompileProto compiles a .proto file's text, with the files it imports
// given by import path in imports (Google's well-known types need not be):
// what ProtoEncode takes.
func CompileProto(t testing.TB, text string, imports map[string]string) protoreflect.FileDescriptor {
	t.Helper()
	files := map[string]string{ProtoMain: text}
	for path, src := range imports {
		if path == ProtoMain {
			t.Fatalf("compile proto: an import may not be named %s", ProtoMain)
		}
		files[path] = src
	}
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(files),
		}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), srOpTimeout)
	defer cancel()
	fds, err := c.Compile(ctx, ProtoMain)
	if err != nil {
		t.Fatalf("compile proto: %v", err)
	}
	return fds[0]
}

// ProtoMessageIndex is the index of message (its full name, or its name in
// fd's package, nested ones as Outer.Inner) in the Confluent header: the
// position of each message on the way to it among its siblings, from the
// file's top level down. The first message of a file is [0].
func ProtoMessageIndex(t testing.TB, fd protoreflect.FileDescriptor, message string) []int {
	t.Helper()
	_, index := protoMessage(t, fd, message)
	return index
}

func protoMessage(t testing.TB, fd protoreflect.FileDescriptor, message string) (protoreflect.MessageDescriptor, []int) {
	t.Helper()
	name := message
	if pkg := string(fd.Package()); pkg != "" {
		name = strings.TrimPrefix(name, pkg+".")
	}
	var (
		md    protoreflect.MessageDescriptor
		index []int
	)
	msgs := fd.Messages()
	for _, part := range strings.Split(name, ".") {
		md = msgs.ByName(protoreflect.Name(part))
		if md == nil {
			t.Fatalf("proto: no message %s in %s (package %q)", message, fd.Path(), fd.Package())
		}
		index = append(index, md.Index())
		msgs = md.Messages()
	}
	return md, index
}

// ProtoEncode encodes message (named as ProtoMessageIndex takes it) of fd,
// its fields given in protojson's form, prefixed with the header of schema
// id and the message's index.
func ProtoEncode(t testing.TB, id int, fd protoreflect.FileDescriptor, message, fieldsJSON string) []byte {
	t.Helper()
	md, index := protoMessage(t, fd, message)
	msg := dynamicpb.NewMessage(md)
	if err := protojson.Unmarshal([]byte(fieldsJSON), msg); err != nil {
		t.Fatalf("proto encode: %s from %s: %v", message, fieldsJSON, err)
	}
	b, err := sr.Encode(msg, confluent, id, index, func(v any) ([]byte, error) {
		return proto.MarshalOptions{Deterministic: true}.Marshal(v.(proto.Message))
	})
	if err != nil {
		t.Fatalf("proto encode: %s: %v", message, err)
	}
	return b
}

// JSONEncode encodes value as JSON (a json.RawMessage as it is, compacted),
// prefixed with the header of schema id. It does not check value against
// the schema: a test of invalid records can encode them too.
func JSONEncode(t testing.TB, id int, value any) []byte {
	t.Helper()
	b, err := sr.Encode(value, confluent, id, nil, json.Marshal)
	if err != nil {
		t.Fatalf("json encode: %v", err)
	}
	return b
}
