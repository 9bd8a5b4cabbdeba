package registry_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"go.uber.org/goleak"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/internal/registry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, harness.GoleakOptions()...)
}

// testTimeout bounds each test's calls.
const testTimeout = time.Minute

const (
	avroMoney = `{"type":"record","name":"Money","namespace":"shop","fields":[{"name":"cents","type":"long"},{"name":"currency","type":"string"}]}`
	avroLine  = `{"type":"record","name":"Line","namespace":"shop","fields":[{"name":"item","type":"string"},{"name":"price","type":"shop.Money"}]}`
	avroOrder = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"lines","type":{"type":"array","items":"shop.Line"}},{"name":"total","type":"shop.Money"}]}`

	protoMoney = `syntax = "proto3";
package shop.common;

message Money {
  int64 cents = 1;
  string currency = 2;
}
`
	protoOrder = `syntax = "proto3";
package shop;

import "shop/common/money.proto";
import "google/protobuf/timestamp.proto";

message Order {
  int64 id = 1;
  shop.common.Money total = 2;
  google.protobuf.Timestamp at = 3;
}
`
	jsonMoney = `{"$id":"https://example.com/money.json","type":"object","properties":{"cents":{"type":"integer"},"currency":{"type":"string"}},"required":["cents"]}`
	jsonOrder = `{"type":"object","properties":{"id":{"type":"integer"},"total":{"$ref":"https://example.com/money.json"}}}`
)

// newClient is a client of cfg closed with the test.
func newClient(t *testing.T, cfg registry.Config) *registry.Client {
	t.Helper()
	c, err := registry.New(cfg)
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestSchemaByID(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	ref := func(name, subject string) harness.SchemaRef {
		return harness.SchemaRef{Name: name, Subject: subject, Version: 1}
	}
	reg.RegisterAvro(t, "money-avro", avroMoney)
	reg.RegisterAvro(t, "line-avro", avroLine, ref("shop.Money", "money-avro"))
	orderAvro := reg.RegisterAvro(t, "orders-avro", avroOrder, ref("shop.Line", "line-avro"), ref("shop.Money", "money-avro"))
	reg.RegisterProtobuf(t, "money-proto", protoMoney)
	orderProto := reg.RegisterProtobuf(t, "orders-proto", protoOrder, ref("shop/common/money.proto", "money-proto"))
	plainJSON := reg.RegisterJSON(t, "money-json", jsonMoney)
	orderJSON := reg.RegisterJSON(t, "orders-json", jsonOrder, ref("https://example.com/money.json", "money-json"))
	plainAvro := reg.RegisterAvro(t, "string-avro", `"string"`)

	c := newClient(t, registry.Config{URL: reg.URL})
	ctx := harness.Context(t, testTimeout)

	// want is a schema as SchemaByID should return it; its references are
	// checked to their ends.
	moneyAvro := &registry.Schema{Type: registry.Avro, Text: avroMoney}
	moneyJSON := &registry.Schema{Type: registry.JSON, Text: jsonMoney}
	for _, tc := range []struct {
		name string
		id   int
		want *registry.Schema
	}{
		{"avro without references", plainAvro, &registry.Schema{ID: plainAvro, Type: registry.Avro, Text: `"string"`}},
		{"avro, references of references", orderAvro, &registry.Schema{ID: orderAvro, Type: registry.Avro, Text: avroOrder, References: []registry.Reference{
			{Name: "shop.Line", Subject: "line-avro", Version: 1, Schema: &registry.Schema{Type: registry.Avro, Text: avroLine, References: []registry.Reference{
				{Name: "shop.Money", Subject: "money-avro", Version: 1, Schema: moneyAvro},
			}}},
			{Name: "shop.Money", Subject: "money-avro", Version: 1, Schema: moneyAvro},
		}}},
		{"protobuf import", orderProto, &registry.Schema{ID: orderProto, Type: registry.Protobuf, Text: protoOrder, References: []registry.Reference{
			{Name: "shop/common/money.proto", Subject: "money-proto", Version: 1, Schema: &registry.Schema{Type: registry.Protobuf, Text: protoMoney}},
		}}},
		{"json schema", plainJSON, &registry.Schema{ID: plainJSON, Type: registry.JSON, Text: jsonMoney}},
		{"json schema $ref", orderJSON, &registry.Schema{ID: orderJSON, Type: registry.JSON, Text: jsonOrder, References: []registry.Reference{
			{Name: "https://example.com/money.json", Subject: "money-json", Version: 1, Schema: moneyJSON},
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.SchemaByID(ctx, tc.id)
			if err != nil {
				t.Fatalf("schema %d: %v", tc.id, err)
			}
			if diff := diffSchema(got, tc.want, "schema"); diff != "" {
				t.Error(diff)
			}
		})
	}
	if st := c.Stats(); st.Errors != 0 || st.NotFound != 0 {
		t.Errorf("stats %+v, want no errors", st)
	}
}

// diffSchema describes how got differs from want, "" if it does not.
func diffSchema(got, want *registry.Schema, at string) string {
	switch {
	case got == nil || want == nil:
		if got != want {
			return fmt.Sprintf("%s: %v, want %v", at, got, want)
		}
		return ""
	case got.ID != want.ID || got.Type != want.Type:
		return fmt.Sprintf("%s: id %d type %s, want id %d type %s", at, got.ID, got.Type, want.ID, want.Type)
	case got.Text != want.Text:
		return fmt.Sprintf("%s: text\n%s\nwant\n%s", at, got.Text, want.Text)
	case len(got.References) != len(want.References):
		return fmt.Sprintf("%s: references %+v, want %+v", at, got.References, want.References)
	}
	for i, g := range got.References {
		w := want.References[i]
		name := fmt.Sprintf("%s reference %d", at, i)
		if g.Name != w.Name || g.Subject != w.Subject || g.Version != w.Version {
			return fmt.Sprintf("%s: %s %s %d, want %s %s %d", name, g.Name, g.Subject, g.Version, w.Name, w.Subject, w.Version)
		}
		if d := diffSchema(g.Schema, w.Schema, name); d != "" {
			return d
		}
	}
	return ""
}

// TestReferencesCached: a reference read once is not read again, for
// another schema or the same.
func TestReferencesCached(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	reg.RegisterAvro(t, "money", avroMoney)
	money := harness.SchemaRef{Name: "shop.Money", Subject: "money", Version: 1}
	line := reg.RegisterAvro(t, "line", avroLine, money)
	order := reg.RegisterAvro(t, "order", strings.Replace(avroOrder, `{"type":"array","items":"shop.Line"}`, `{"type":"array","items":"string"}`, 1), money)
	c := newClient(t, registry.Config{URL: reg.URL})
	ctx := harness.Context(t, testTimeout)

	for _, step := range []struct {
		id       int
		requests uint64 // in all, after the call
	}{
		{line, 2},  // the schema, and Money
		{order, 3}, // the schema only
		{line, 4},  // the schema only: by id is never cached
	} {
		s, err := c.SchemaByID(ctx, step.id)
		if err != nil {
			t.Fatalf("schema %d: %v", step.id, err)
		}
		if got := s.References[0].Schema; got == nil || got.Text != avroMoney {
			t.Fatalf("schema %d: reference %+v", step.id, s.References[0])
		}
		if st := c.Stats(); st.Requests != step.requests {
			t.Errorf("after schema %d: %d requests, want %d", step.id, st.Requests, step.requests)
		}
	}
}

func TestUnknownID(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	c := newClient(t, registry.Config{URL: reg.URL})
	_, err := c.SchemaByID(harness.Context(t, testTimeout), 4711)
	if !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("unknown id: %v, want ErrNotFound", err)
	}
	var se *registry.StatusError
	if !errors.As(err, &se) || se.StatusCode != 404 || se.ErrorCode != 40403 {
		t.Fatalf("unknown id: %v, want a StatusError of 404, 40403", err)
	}
	for _, want := range []string{"schema 4711", reg.URL + "/schemas/ids/4711", "40403"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if st := c.Stats(); st != (registry.Stats{Requests: 1, NotFound: 1}) {
		t.Errorf("stats %+v, want 1 request, 1 not found", st)
	}
}

// TestMissingReference: a schema whose reference is gone (its subject
// deleted for good) cannot be resolved, ever: not found.
func TestMissingReference(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	reg.RegisterAvro(t, "money", avroMoney)
	id := reg.RegisterAvro(t, "line", avroLine, harness.SchemaRef{Name: "shop.Money", Subject: "money", Version: 1})
	ctx := harness.Context(t, testTimeout)
	// The registry refuses to delete a subject that a live version
	// references, but not one that only a (soft-)deleted version does;
	// and a deleted version's schema is still served by id.
	cl := reg.Client()
	for _, step := range []struct {
		subject   string
		permanent sr.DeleteHow
	}{{"line", sr.SoftDelete}, {"money", sr.SoftDelete}, {"money", sr.HardDelete}} {
		if _, err := cl.DeleteSubject(ctx, step.subject, step.permanent); err != nil {
			t.Fatalf("delete %s (permanent %v): %v", step.subject, step.permanent, err)
		}
	}
	c := newClient(t, registry.Config{URL: reg.URL})
	_, err := c.SchemaByID(ctx, id)
	if !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("missing reference: %v, want ErrNotFound", err)
	}
	var se *registry.StatusError
	if !errors.As(err, &se) || se.ErrorCode != 40401 {
		t.Fatalf("missing reference: %v, want a StatusError of 40401 (subject not found)", err)
	}
	want := fmt.Sprintf(`schema %d: reference "shop.Money" (subject "money" version 1): get %s/subjects/money/versions/1`, id, reg.URL)
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start %q", err, want)
	}
}

// TestWrongPath: a URL whose path is no registry's gets 404s that are not
// the registry's not-found: they must not pass for unknown schemas.
func TestWrongPath(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	id := reg.RegisterAvro(t, "s", `"string"`)
	c := newClient(t, registry.Config{URL: reg.URL + "/no/such/prefix"})
	_, err := c.SchemaByID(harness.Context(t, testTimeout), id)
	if err == nil || errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("wrong path: %v, want an error that is not ErrNotFound", err)
	}
	if !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "/no/such/prefix/schemas/ids/") {
		t.Errorf("error %q does not say 404 and the URL", err)
	}
	if st := c.Stats(); st.Errors != 1 || st.NotFound != 0 {
		t.Errorf("stats %+v, want 1 error", st)
	}
}

// TestPausedRegistry: a registry that does not answer costs a caller the
// timeout and an error that is not ErrNotFound; once it answers again,
// so does the client.
func TestPausedRegistry(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	id := reg.RegisterJSON(t, "money", jsonMoney)
	const timeout = 300 * time.Millisecond
	c := newClient(t, registry.Config{URL: reg.URL, Timeout: timeout})
	ctx := harness.Context(t, testTimeout)

	reg.Pause()
	start := time.Now()
	_, err := c.SchemaByID(ctx, id)
	took := time.Since(start)
	if err == nil || errors.Is(err, registry.ErrNotFound) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused: %v, want a timeout that is not ErrNotFound", err)
	}
	if took < timeout || took > 10*timeout {
		t.Errorf("paused: the call took %s, want about %s", took, timeout)
	}
	for _, want := range []string{reg.URL, "no answer within 300ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	reg.Resume()
	if _, err := c.SchemaByID(ctx, id); err != nil {
		t.Fatalf("resumed: %v", err)
	}
	if st := c.Stats(); st != (registry.Stats{Requests: 2, Errors: 1}) {
		t.Errorf("stats %+v, want 2 requests, 1 error", st)
	}
}

// TestStoppedRegistry: connections refused are an error, not ErrNotFound.
func TestStoppedRegistry(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	id := reg.RegisterJSON(t, "money", jsonMoney)
	c := newClient(t, registry.Config{URL: reg.URL})
	reg.Stop()
	_, err := c.SchemaByID(harness.Context(t, testTimeout), id)
	if !errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("stopped: %v, want connection refused", err)
	}
	if !strings.Contains(err.Error(), reg.URL) {
		t.Errorf("error %q does not name %s", err, reg.URL)
	}
}

// TestFailover: a URL that refuses is passed over for the next, which is
// then tried first; when none answers, the error names each.
func TestFailover(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	id := reg.RegisterJSON(t, "money", jsonMoney)
	dead := "http://" + harness.Refused(t)
	c := newClient(t, registry.Config{URL: dead + ", " + reg.URL + "/"})
	ctx := harness.Context(t, testTimeout)

	for _, want := range []registry.Stats{
		{Requests: 2, Errors: 1}, // the dead one, then the registry
		{Requests: 3, Errors: 1}, // the registry only
	} {
		if _, err := c.SchemaByID(ctx, id); err != nil {
			t.Fatalf("schema %d: %v", id, err)
		}
		if st := c.Stats(); st != want {
			t.Errorf("stats %+v, want %+v", st, want)
		}
	}
	reg.Stop()
	_, err := c.SchemaByID(ctx, id)
	if err == nil || !strings.Contains(err.Error(), dead) || !strings.Contains(err.Error(), reg.URL) {
		t.Fatalf("none answers: %v, want an error naming %s and %s", err, dead, reg.URL)
	}
}

// TestTLSBasicAuth runs against a registry that serves HTTPS only and
// requires basic auth: the client's TLS configuration and credentials
// reach it, and a refusal is an error that is not ErrNotFound.
func TestTLSBasicAuth(t *testing.T) {
	reg := harness.StartSchemaRegistry(t, harness.SchemaRegistryTLS(), harness.SchemaRegistryBasicAuth("offsetkeeper", "s3cret:with:colons"))
	id := reg.RegisterAvro(t, "money", avroMoney)
	ctx := harness.Context(t, testTimeout)

	c := newClient(t, registry.Config{URL: reg.URL, TLS: reg.TLS(), Username: reg.Username, Password: reg.Password})
	s, err := c.SchemaByID(ctx, id)
	if err != nil || s.Text != avroMoney {
		t.Fatalf("schema %d over TLS with credentials: %v, %v", id, s, err)
	}

	for _, tc := range []struct {
		name   string
		cfg    registry.Config
		want   string // in the error
		isErr  func(error) bool
		secret string // must not be in the error
	}{
		{
			name: "wrong password", cfg: registry.Config{URL: reg.URL, TLS: reg.TLS(), Username: reg.Username, Password: "guess"},
			want: "401", secret: "guess",
			isErr: func(err error) bool { var se *registry.StatusError; return errors.As(err, &se) && se.StatusCode == 401 },
		},
		{
			name: "no credentials", cfg: registry.Config{URL: reg.URL, TLS: reg.TLS()},
			want:  "401",
			isErr: func(err error) bool { var se *registry.StatusError; return errors.As(err, &se) && se.StatusCode == 401 },
		},
		{
			name: "CA not trusted", cfg: registry.Config{URL: reg.URL, Username: reg.Username, Password: reg.Password},
			want: "certificate", secret: reg.Password,
			isErr: func(err error) bool { var ue x509.UnknownAuthorityError; return errors.As(err, &ue) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.cfg)
			_, err := c.SchemaByID(ctx, id)
			if err == nil || errors.Is(err, registry.ErrNotFound) || !tc.isErr(err) {
				t.Fatalf("%v: want an error of %s that is not ErrNotFound", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), reg.URL) {
				t.Errorf("error %q does not say %s and the URL", err, tc.want)
			}
			if tc.secret != "" && strings.Contains(err.Error(), tc.secret) {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	anyTLS := &tls.Config{MinVersion: tls.VersionTLS12}
	for _, tc := range []struct {
		name string
		cfg  registry.Config
		want string // in the error
	}{
		{"empty", registry.Config{}, "registry URL is empty"},
		{"blank", registry.Config{URL: "  "}, "registry URL is empty"},
		{"no scheme", registry.Config{URL: "localhost:8081"}, `"localhost:8081": scheme "localhost"`},
		{"no scheme, no port", registry.Config{URL: "registry"}, `"registry": scheme ""`},
		{"other scheme", registry.Config{URL: "ftp://registry:8081"}, `scheme "ftp"`},
		{"no host", registry.Config{URL: "http://"}, `"http://" has no host`},
		{"port only", registry.Config{URL: "http://:8081"}, "has no host"},
		{"not a URL", registry.Config{URL: "http://[::1"}, `"http://[::1" is not a URL`},
		{"credentials", registry.Config{URL: "https://bob:hunter2@registry:8081"}, "holds credentials"},
		{"query", registry.Config{URL: "http://registry:8081/?x=1"}, "has a query or fragment"},
		{"fragment", registry.Config{URL: "http://registry:8081/#top"}, "has a query or fragment"},
		{"empty entry", registry.Config{URL: "http://a:8081,,http://b:8081"}, "an empty entry"},
		{"trailing comma", registry.Config{URL: "http://a:8081,"}, "an empty entry"},
		{"bad second", registry.Config{URL: "http://a:8081,b:8081"}, `"b:8081": scheme "b"`},
		{"TLS without https", registry.Config{URL: "http://a:8081", TLS: anyTLS}, `no URL of "http://a:8081" is https://`},
		{"password without user", registry.Config{URL: "http://a:8081", Password: "x"}, "password given without a username"},
		{"negative timeout", registry.Config{URL: "http://a:8081", Timeout: -time.Second}, "timeout -1s: want a positive duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := registry.New(tc.cfg)
			if err == nil {
				_ = c.Close()
				t.Fatalf("%+v accepted", tc.cfg)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
	for _, ok := range []registry.Config{
		{URL: "http://127.0.0.1:8081"},
		{URL: "https://registry.example.com/sr/", TLS: anyTLS, Username: "u", Password: "p"},
		{URL: " http://a:8081 , HTTPS://b:8081 ", Timeout: time.Second},
		{URL: "http://[::1]:8081", Username: "u"},
	} {
		c, err := registry.New(ok)
		if err != nil {
			t.Errorf("%+v refused: %v", ok, err)
			continue
		}
		_ = c.Close()
	}
}

// TestCallerLeaves: a caller whose context ends returns at once with its
// context's error, while the fetch goes on for the callers still waiting.
func TestCallerLeaves(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	id := reg.RegisterJSON(t, "money", jsonMoney)
	c := newClient(t, registry.Config{URL: reg.URL, Timeout: 30 * time.Second})
	ctx := harness.Context(t, testTimeout)

	reg.Pause()
	stays := make(chan error, 1)
	go func() {
		_, err := c.SchemaByID(ctx, id)
		stays <- err
	}()
	harness.Await(t, 10*time.Second, "the request sent", func() bool { return c.Stats().Requests == 1 })
	leaving, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := c.SchemaByID(leaving, id)
		left <- err
	}()
	cancel()
	select {
	case err := <-left:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the caller that left: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller that left is still waiting")
	}
	reg.Resume()
	if err := <-stays; err != nil {
		t.Fatalf("the caller that stayed: %v", err)
	}
	if st := c.Stats(); st.Requests != 1 {
		t.Errorf("%d requests, want 1", st.Requests)
	}
}

// TestClose: Close ends a fetch under way at once, its callers get
// ErrClosed, and later calls too.
func TestClose(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	id := reg.RegisterJSON(t, "money", jsonMoney)
	c, err := registry.New(registry.Config{URL: reg.URL, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := harness.Context(t, testTimeout)
	reg.Pause()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.SchemaByID(ctx, id)
			errs <- err
		}()
	}
	harness.Await(t, 10*time.Second, "the request sent", func() bool { return c.Stats().Requests == 1 })
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("close took %s", took)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		// A caller that came after the fetch ended, or after Close, gets
		// ErrClosed as well.
		if !errors.Is(err, registry.ErrClosed) {
			t.Errorf("a caller during Close: %v, want ErrClosed", err)
		}
	}
	if _, err := c.SchemaByID(ctx, id); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("close again: %v", err)
	}
	reg.Resume()
}
