package dev_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/dev"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/file"
)

// TestRunValueFormats: a run whose producer writes Avro or Protobuf in
// Confluent's wire format, the schema in the run's embedded registry,
// loses nothing, and the default file sink holds each value as the JSON
// object a json run writes, decoded by the replicas; the verdict says that
// the records were checked by their offsets, not compared with Kafka's
// bytes.
func TestRunValueFormats(t *testing.T) {
	const messages, partitions = 300, 3
	for _, f := range []sinks.Format{sinks.Avro, sinks.Protobuf} {
		t.Run(string(f), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dir := t.TempDir()
			var stderr, stdout lockedBuffer
			var ready dev.Endpoints
			rep, err := dev.Run(ctx, dev.Config{
				Messages: messages, Replicas: 2, Partitions: partitions, ValueFormat: f, Dir: dir,
				Ready: func(e dev.Endpoints) { ready = e },
				Out:   &stdout, Err: &stderr,
			})
			if err != nil {
				t.Fatalf("Run: %v\nstderr:\n%s", err, stderr.String())
			}
			v := rep.Verdict
			if got, want := rep.Line(), fmt.Sprintf("produced=%d delivered=%d lost=0 duplicates=0 mismatched=n/a dead_letters=0", messages, messages); got != want {
				t.Errorf("line %q, want %q\nstderr:\n%s", got, want, stderr.String())
			}
			if want := "records not compared, only their offsets: records decoded through a Schema Registry are not compared"; !v.Audited() || v.Compared != 0 || !strings.Contains(v.By, want) {
				t.Errorf("verdict by %q, %d compared: want the audit, saying %q", v.By, v.Compared, want)
			}
			if !strings.HasPrefix(ready.Registry, "http://127.0.0.1:") || rep.Endpoints.Registry != ready.Registry {
				t.Errorf("registry %q (report %q), want a loopback URL", ready.Registry, rep.Endpoints.Registry)
			}
			if want := fmt.Sprintf("\nregistry: %s (values in %s, schema id 1, subject events-value)\n", ready.Registry, f); !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
			}

			// Each value is the JSON the producer meant: {"n": N, "at": time},
			// N the number in its key.
			shape := regexp.MustCompile(`^\{"n":\d+,"at":"[^"]+"\}$`)
			seen := 0
			for p := range partitions {
				records, err := file.ReadAll(filepath.Join(dir, "sink"), dev.DefaultTopic, p)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range records {
					seen++
					var val struct {
						N  int64
						At string
					}
					if err := json.Unmarshal(r.Value, &val); err != nil || !shape.Match(r.Value) {
						t.Fatalf("%d/%d: value %s (%v), want {\"n\":N,\"at\":\"…\"}", p, r.Offset, r.Value, err)
					}
					at, err := time.Parse(time.RFC3339Nano, val.At)
					if string(r.Key) != fmt.Sprintf("k-%d", val.N) || val.N != r.Offset*partitions+int64(p) || err != nil || at.Before(time.Now().Add(-time.Hour)) {
						t.Fatalf("%d/%d: key %q, value %s: want n %d, the key's, and a time of this run", p, r.Offset, r.Key, r.Value, r.Offset*partitions+int64(p))
					}
					if r.Decoded == nil || r.Decoded.ValueSchema == nil || r.Decoded.ValueSchema.ID != dev.SchemaID {
						t.Fatalf("%d/%d: decoded %+v, want value schema %d", p, r.Offset, r.Decoded, dev.SchemaID)
					}
				}
				if p == 1 && len(records) > 0 {
					t.Logf("events/1 at %d: key %s, value %s", records[0].Offset, records[0].Key, records[0].Value)
				}
			}
			if seen != messages {
				t.Errorf("%d records read back, want %d", seen, messages)
			}
			t.Logf("%s; verdict: %s", rep.Line(), v.By)
		})
	}
}

// TestRunRefusesAnUnknownValueFormat names the value and the formats.
func TestRunRefusesAnUnknownValueFormat(t *testing.T) {
	_, err := dev.Run(context.Background(), dev.Config{Messages: 1, ValueFormat: "json-schema"})
	if want := `dev: value format "json-schema": want json, avro or protobuf`; err == nil || err.Error() != want {
		t.Errorf("Run: %v, want %q", err, want)
	}
}
