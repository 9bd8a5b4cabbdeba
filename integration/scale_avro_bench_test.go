package integration_test

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// avroBacklogSchema is a record whose JSON is about 1.6 times its Avro: a
// text field and an array of small numbers, which Avro writes in a byte
// each and JSON with a field name each.
const avroBacklogSchema = `{"type":"record","name":"reading","fields":[
 {"name":"id","type":"long"},
 {"name":"payload","type":"string"},
 {"name":"samples","type":{"type":"array","items":"int"}}]}`

// avroBacklogValue is one record of about size bytes in Confluent's wire
// format (schema id 1): half text, half samples.
func avroBacklogValue(id, size int) []byte {
	v := []byte{0, 0, 0, 0, 1}
	v = binary.AppendVarint(v, int64(id))
	text := size / 2
	v = binary.AppendVarint(v, int64(text))
	for i := range text {
		v = append(v, 'a'+byte(i%26))
	}
	samples := max(size-len(v)-4, 1)
	v = binary.AppendVarint(v, int64(samples))
	for i := range samples {
		v = binary.AppendVarint(v, int64(i%60)) // one byte each
	}
	return append(v, 0)
}

// BenchmarkScaleAvroBacklogRSS: a backlog of RECORDS (default 100,000;
// -short 5,000) Avro records of RECORD_BYTES (default 20,480) over
// PARTITIONS partitions (default 64), about 2 GB, read by ONE replica as a
// process (`offsetkeeper run --sink discard: --value-format avro`, the
// command's defaults, so the default --max-buffer-bytes) that decodes
// every value into JSON. It reports the replica's peak resident memory,
// its throughput and CPU seconds, and the JSON's size per Avro byte.
// Decoded JSON counts against --max-buffer-bytes: the goal is a peak under
// 512 MiB whatever the backlog.
//
//	go test -run '^$' -bench 'ScaleAvroBacklogRSS$' -benchtime 1x -timeout 60m ./integration/
//	go test -short -run '^$' -bench 'ScaleAvroBacklogRSS$' -benchtime 1x ./integration/
func BenchmarkScaleAvroBacklogRSS(b *testing.B) {
	parts := scaleInt(b, "PARTITIONS", 64, 64)
	total := scaleInt(b, "RECORDS", 100_000, 5_000)
	size := scaleInt(b, "RECORD_BYTES", 20<<10, 20<<10)
	perPart := total / parts
	total = perPart * parts

	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/schemas/ids/1" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		_, _ = fmt.Fprintf(w, `{"schema":%q}`, avroBacklogSchema)
	}))
	b.Cleanup(reg.Close)

	etcd := harness.StartEtcd(b, 1)
	cli := etcd.Client(b)
	k := harness.StartKafka(b, harness.SeedTopics(parts, "avro-backlog"))
	value := avroBacklogValue(1, size)
	chunk := max(1, min(perPart, (16<<20)/size))
	for p := range parts {
		for from := 0; from < perPart; from += chunk {
			recs := make([]*kgo.Record, min(chunk, perPart-from))
			for i := range recs {
				recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "key-%07d", from+i), Value: value}
			}
			k.Produce(b, "avro-backlog", p, recs...)
		}
	}

	drainBacklog(b, etcd, cli, k, "avro-backlog", total, size, "--value-format", "avro", "--schema-registry", reg.URL)
}
