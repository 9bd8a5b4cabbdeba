package integration_test

import (
	"strings"
	"testing"
	"time"
)

// TestApacheHangingTransactionIsANumber: a replica reads read_committed a
// partition where Kafka's Java producer, in the middle of a transaction
// (50 records sent, transaction.timeout.ms 10 minutes), is SIGKILLed; 100
// plain records follow. The last stable offset stays at the open
// transaction's first offset, so the lag reads 0 and the partition is not
// stalled; the records the transaction holds back are a number
// (offsetkeeper_partition_unstable_records, 150), and so is how long the
// last stable offset has not moved (offsetkeeper_partition_lso_stalled_seconds,
// growing), which OffsetkeeperTransactionHeld alerts on
// (deploy/prometheus's test).
func TestApacheHangingTransactionIsANumber(t *testing.T) {
	e := newEnvOn(t, apacheBackend, "hanging", 1)
	dir := t.TempDir()
	e.produce(100)
	e.process("a", dir, "--lease-ttl", "10s")
	await(t, 30*time.Second, "100 committed", func() bool { return e.allCommitted(map[int]int64{0: 100}) })
	base := e.memberHTTP("a")

	p := e.kafka.StartJava(t, "txn-producer", "TxnProducer", "--bootstrap", strings.Join(e.kafka.Brokers(), ","),
		"--topic", e.topic, "--records", "0", "--mode", "transactional", "--hang", "50", "--transaction-timeout-ms", "600000")
	await(t, 60*time.Second, "the producer's transaction open", func() bool { return strings.Contains(p.Output(), "hanging") })
	p.Kill()
	e.produce(100)
	if end := e.kafka.EndOffsets(t, e.topic)[0]; end != 250 {
		t.Fatalf("high watermark %d, want 250 (100, 50 in the open transaction, 100)", end)
	}

	var first float64
	await(t, 60*time.Second, "the records held back by the open transaction exported", func() bool {
		m := scrape(t, base+"/metrics")
		first = m.value("offsetkeeper_partition_lso_stalled_seconds", "group", e.group, "partition", "0")
		return m.value("offsetkeeper_partition_unstable_records", "group", e.group, "partition", "0") == 150 && first > 0
	})
	// Still held a few seconds later: the number grows, the lag stays 0.
	var m metrics
	await(t, 30*time.Second, "the stall of the last stable offset to grow", func() bool {
		m = scrape(t, base+"/metrics")
		return m.value("offsetkeeper_partition_lso_stalled_seconds", "group", e.group, "partition", "0") >= first+5
	})
	if got := m.lag(0); got != 0 {
		t.Errorf("lag %v, want 0: the last stable offset has not moved", got)
	}
	if got := m.value("offsetkeeper_partition_stalled_seconds", "group", e.group, "partition", "0"); got != 0 {
		t.Errorf("offsetkeeper_partition_stalled_seconds %v, want 0: nothing readable is behind", got)
	}
	if got := m.value("offsetkeeper_partition_unstable_records", "group", e.group, "partition", "0"); got != 150 {
		t.Errorf("offsetkeeper_partition_unstable_records %v, want 150", got)
	}
	if c := e.committed()[0]; c != 100 {
		t.Errorf("committed %d, want 100: nothing past the open transaction is delivered", c)
	}
	t.Logf("lag 0, %v records held back by the open transaction, the last stable offset still for %.0f s",
		m.value("offsetkeeper_partition_unstable_records", "group", e.group, "partition", "0"),
		m.value("offsetkeeper_partition_lso_stalled_seconds", "group", e.group, "partition", "0"))
}
