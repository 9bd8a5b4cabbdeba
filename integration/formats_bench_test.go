package integration_test

import (
	"context"
	"fmt"
	"math/big"
	"os"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/internal/format"
	"github.com/offsetkeeper/offsetkeeper/internal/registry"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/discard"
)

const benchAvro = `{"type":"record","name":"Order","namespace":"bench","fields":[
 {"name":"id","type":"long"},
 {"name":"customer","type":"string"},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID","SHIPPED"]}},
 {"name":"created","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
 {"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line","fields":[
   {"name":"sku","type":"string"},{"name":"qty","type":"int"},{"name":"price","type":"double"}]}}},
 {"name":"tags","type":{"type":"map","values":"string"}},
 {"name":"note","type":["null","string"],"default":null}
]}`

const benchProto = `syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
message Order {
  message Line { string sku = 1; int32 qty = 2; double price = 3; }
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
  int64 id = 1;
  string customer = 2;
  Status status = 3;
  google.protobuf.Timestamp created = 4;
  string amount = 5;
  repeated Line lines = 6;
  map<string, string> tags = 7;
  optional string note = 8;
}
`

// BenchmarkDecodeReplicaVsLoop: Avro and Protobuf records of about 200
// bytes, in Confluent's wire format, decoded by a replica into discard:
// (fetch, decode into JSON, an etcd commit per block) against a loop that
// only decodes the same records, already in memory, with the same libraries
// a user would: hamba/avro's Unmarshal into map[string]any, and
// proto.Unmarshal into a dynamicpb message. Both in the same run; ratio is
// replica records/s over the loop's. ratio-to-own-decoder sets the replica
// beside a loop of its own decoder alone: what fetching, blocks and etcd
// cost beside decoding.
//
//	go test -run '^$' -bench DecodeReplicaVsLoop -benchtime 3x ./integration/
func BenchmarkDecodeReplicaVsLoop(b *testing.B) {
	const parts, perPart = 8, 25_000
	reg := harness.StartSchemaRegistry(b)
	etcd := harness.StartEtcd(b, 1)
	for _, f := range []sinks.Format{sinks.Avro, sinks.Protobuf} {
		b.Run(string(f), func(b *testing.B) {
			k := harness.StartKafka(b, harness.SeedTopics(parts, "bench"))
			values, loop := benchRecords(b, reg, f, parts*perPart)
			size := 0
			for p := 0; p < parts; p++ {
				recs := make([]*kgo.Record, perPart)
				for i := range recs {
					v := values[p*perPart+i]
					size += len(v)
					recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: v}
				}
				k.Produce(b, "bench", p, recs...)
			}
			total := float64(parts * perPart)
			// The replica's own decoder alone, in a loop: what the rest of
			// the replica (fetch, blocks, etcd) costs beside decoding.
			cli, err := registry.New(registry.Config{URL: reg.URL})
			if err != nil {
				b.Fatal(err)
			}
			defer cli.Close()
			dec, err := format.New(f, cli, format.Options{})
			if err != nil {
				b.Fatal(err)
			}
			var loopTime, ownTime, replicaTime, loopCPU, replicaCPU time.Duration
			var etcdRounds int64
			cpu := func() time.Duration {
				d, err := harness.ProcCPU(os.Getpid())
				if err != nil {
					b.Fatal(err)
				}
				return d
			}
			round := 0
			for b.Loop() {
				round++
				start, cpu0 := time.Now(), cpu()
				loop(values)
				loopTime += time.Since(start)
				loopCPU += cpu() - cpu0
				start = time.Now()
				var buf []byte
				for _, v := range values {
					if buf, _, err = dec.Decode(context.Background(), buf[:0], v); err != nil {
						b.Fatal(err)
					}
				}
				ownTime += time.Since(start)

				sink := discard.New()
				var decodeErrors int64
				var last replica.Stats
				cpu0 = cpu()
				replicaTime += drainTimed(b, etcd.Client(b), k.Brokers(), fmt.Sprintf("bench-%s-%d", f, round), sink, func(s replica.Stats) bool {
					decodeErrors, last = s.DecodeErrors, s
					return s.Records >= int64(parts*perPart) && s.Claims >= parts
				}, func(c *replica.Config) {
					c.Formats = replica.Formats{Value: f, Registry: replica.SchemaRegistry{URL: reg.URL}}
				})
				replicaCPU += cpu() - cpu0
				etcdRounds += last.EtcdRounds
				if sink.Records() != int64(parts*perPart) || decodeErrors != 0 {
					b.Fatalf("discard got %d records (%d decode errors), want %d", sink.Records(), decodeErrors, parts*perPart)
				}
			}
			lp := total * float64(round) / loopTime.Seconds()
			rep := total * float64(round) / replicaTime.Seconds()
			b.ReportMetric(float64(size)/total, "bytes/record")
			b.ReportMetric(lp, "loop-records/s")
			b.ReportMetric(rep, "replica-records/s")
			b.ReportMetric(rep/lp, "ratio")
			own := total * float64(round) / ownTime.Seconds()
			b.ReportMetric(own, "own-decoder-records/s")
			b.ReportMetric(rep/own, "ratio-to-own-decoder")
			// Cost: CPU of the whole process (kfake and etcd run in it too)
			// per million records, and etcd transactions per run.
			b.ReportMetric(loopCPU.Seconds()*1e6/(total*float64(round)), "loop-cpu-s/Mrec")
			b.ReportMetric(replicaCPU.Seconds()*1e6/(total*float64(round)), "replica-cpu-s/Mrec")
			b.ReportMetric(float64(etcdRounds)/float64(round), "etcd-txns/run")
		})
	}
}

// benchRecords registers the format's schema and returns n encoded order
// records, and the loop that decodes them with the format's own library.
func benchRecords(b *testing.B, reg *harness.SchemaRegistry, f sinks.Format, n int) ([][]byte, func([][]byte)) {
	values := make([][]byte, n)
	created := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	switch f {
	case sinks.Avro:
		id := reg.RegisterAvro(b, "bench-avro-value", benchAvro)
		schema := avro.MustParse(benchAvro)
		for i := range values {
			values[i] = harness.AvroEncode(b, id, benchAvro, map[string]any{
				"id": int64(i), "customer": fmt.Sprintf("customer-%06d@example.com", i%10_000), "status": "PAID",
				"created": created.Add(time.Duration(i) * time.Millisecond), "amount": big.NewRat(int64(i)*100+99, 100),
				"lines": []map[string]any{{"sku": "SKU-000123", "qty": 2, "price": 19.99}, {"sku": "SKU-000456", "qty": 1, "price": 5.25}},
				"tags":  map[string]any{"channel": "web", "region": "eu-west"}, "note": "leave at the door",
			})
		}
		return values, func(vs [][]byte) {
			for _, v := range vs {
				var out map[string]any
				if err := avro.Unmarshal(schema, v[5:], &out); err != nil {
					b.Fatal(err)
				}
			}
		}
	default:
		id := reg.RegisterProtobuf(b, "bench-proto-value", benchProto)
		fd := harness.CompileProto(b, benchProto, nil)
		md := fd.Messages().ByName(protoreflect.Name("Order"))
		for i := range values {
			values[i] = harness.ProtoEncode(b, id, fd, "bench.Order", fmt.Sprintf(
				`{"id":%d,"customer":"customer-%06d@example.com","status":"PAID","created":%q,"amount":"%d.99",
				 "lines":[{"sku":"SKU-000123","qty":2,"price":19.99},{"sku":"SKU-000456","qty":1,"price":5.25}],
				 "tags":{"channel":"web","region":"eu-west"},"note":"leave at the door"}`,
				i, i%10_000, created.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), i))
		}
		return values, func(vs [][]byte) {
			for _, v := range vs {
				// The header is 5 bytes and the index [0] one more.
				if err := proto.Unmarshal(v[6:], dynamicpb.NewMessage(md)); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}
