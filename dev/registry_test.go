package dev

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/internal/format"
	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// TestEncoderDecodesThroughTheRegistry: each value format's bytes, read
// back through the embedded registry with the client and decoder the
// replicas use, are the JSON object a json run writes, byte for byte.
func TestEncoderDecodesThroughTheRegistry(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	for _, f := range []sinks.Format{sinks.Avro, sinks.Protobuf} {
		t.Run(string(f), func(t *testing.T) {
			reg, err := startRegistry("events", f)
			if err != nil {
				t.Fatal(err)
			}
			defer reg.Close()
			cli, err := registry.New(registry.Config{URL: reg.url})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			dec, err := format.New(f, cli, format.Options{})
			if err != nil {
				t.Fatal(err)
			}
			plain, err := newEncoder(sinks.JSON)
			if err != nil {
				t.Fatal(err)
			}
			enc, err := newEncoder(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int64{0, 1, 150, 1 << 40} {
				want, _ := plain.encode(n, at)
				b, err := enc.encode(n, at)
				if err != nil {
					t.Fatal(err)
				}
				if b[0] != 0 || b[4] != SchemaID || (f == sinks.Protobuf && b[5] != 0) {
					t.Fatalf("record %d: header % x, want 00 00000001 (and 00 for the message index)", n, b[:6])
				}
				got, s, err := dec.Decode(context.Background(), nil, b)
				if err != nil {
					t.Fatalf("record %d: decode % x: %v", n, b, err)
				}
				if string(got) != string(want) || s.ID != SchemaID {
					t.Errorf("record %d: decoded %s (schema %d), want %s (schema %d)", n, got, s.ID, want, SchemaID)
				}
			}
			if _, err := cli.SchemaByID(context.Background(), 2); !errors.Is(err, registry.ErrNotFound) {
				t.Errorf("schema 2: %v, want the registry's not-found", err)
			}
		})
	}
}

// TestRegistryAnswersLikeConfluents: the subjects API a user may try
// with curl, and Confluent's error codes.
func TestRegistryAnswersLikeConfluents(t *testing.T) {
	reg, err := startRegistry("orders", sinks.Protobuf)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	for _, tc := range []struct {
		method, path string
		status       int
		want         string
	}{
		{"GET", "/schemas/ids/1", 200, `"schemaType":"PROTOBUF"`},
		{"GET", "/schemas/ids/7", 404, `"error_code":40403`},
		{"GET", "/subjects", 200, `["orders-value"]`},
		{"GET", "/subjects/orders-value/versions", 200, `[1]`},
		{"GET", "/subjects/orders-value/versions/latest", 200, `"id":1`},
		{"GET", "/subjects/orders-value/versions/2", 404, `"error_code":40402`},
		{"GET", "/subjects/nope/versions/1", 404, `"error_code":40401`},
		{"GET", "/config", 404, `"error_code":404`},
		{"POST", "/subjects/orders-value/versions", 404, `"error_code":404`},
	} {
		req, err := http.NewRequest(tc.method, reg.url+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.want) || !json.Valid(body) {
			t.Errorf("%s %s: %d %s, want %d with %s", tc.method, tc.path, resp.StatusCode, body, tc.status, tc.want)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/vnd.schemaregistry.v1+json" {
			t.Errorf("%s %s: content type %q", tc.method, tc.path, ct)
		}
	}
}

func TestParseValueFormat(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", "json", ""},
		{" AVRO ", "avro", ""},
		{"protobuf", "protobuf", ""},
		{"json-schema", "", `value format "json-schema": want json, avro or protobuf`},
	} {
		f, err := ParseValueFormat(tc.in)
		if string(f) != tc.want || fmt.Sprint(err) != cmp.Or(tc.err, "<nil>") {
			t.Errorf("ParseValueFormat(%q) = %q, %v; want %q, %q", tc.in, f, err, tc.want, tc.err)
		}
	}
}
