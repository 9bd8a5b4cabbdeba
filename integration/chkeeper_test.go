package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// ClickHouse's Kafka engine in its newer form, its offsets in Keeper
// (kafka_keeper_path; experimental), runs here: the tests' ClickHouse
// against Apache ZooKeeper from Maven Central and the 3-node Apache Kafka
// reads every record of a topic once, so that
// BenchmarkClickHouseEngineVsReplicaFaults can set it beside the older
// engine and the replicas.
func TestKafkaEngineWithOffsetsInKeeper(t *testing.T) {
	if testing.Short() {
		t.Skip("ZooKeeper, ClickHouse and the 3-node Kafka")
	}
	zk := harness.StartZooKeeper(t)
	ch := harness.StartClickHouse(t)
	ch.SetKeeper(t, zk.Addr())
	e := newEnvOn(t, apacheBackend, "keeper", 2)
	ch.Exec(t, chEngineTarget("kp_rows", 0))
	createKeeperEngine(t, ch, &benchKafka{e.kafka}, e.topic, "kp", "kp_rows", "/clickhouse/"+e.topic, "r1",
		engineSettings{consumers: 1, blockSize: 65536, flushMS: 500})
	const total = 4000
	if n, err := paceJSON(context.Background(), trickleProducer(t, e.kafka), e.topic, 2, 2000, 0, total); err != nil || n != total {
		t.Fatalf("produced %d of %d: %v", n, total, err)
	}
	await(t, 90*time.Second, "the keeper engine to write every record", func() bool {
		return ch.QueryInt(t, `SELECT count() FROM kp_rows`) >= total
	})
	if n, d := ch.QueryInt(t, `SELECT count() FROM kp_rows`), ch.QueryInt(t, `SELECT uniqExact(id) FROM kp_rows`); n != total || d != total {
		t.Errorf("%d rows with %d distinct ids, want %d of each", n, d, total)
	}
	dropEngine(t, ch, "kp_rows")
}
