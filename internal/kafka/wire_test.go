package kafka

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestParseFetchResponse(t *testing.T) {
	records := concat(t, testBatch{base: 3, records: values3("a", 0)})
	for v := int16(0); v <= maxRawFetchVersion; v++ {
		res := kmsg.NewFetchResponse()
		res.Version = v
		res.ErrorCode = 0
		topic := kmsg.NewFetchResponseTopic()
		topic.Topic = "t"
		for i := range 2 {
			p := kmsg.NewFetchResponseTopicPartition()
			p.Partition = int32(i)
			p.ErrorCode = int16(i)
			p.HighWatermark = 100
			p.LastStableOffset = 90
			p.LogStartOffset = 1
			if i == 1 {
				p.RecordBatches = records
				at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
				at.ProducerID, at.FirstOffset = 7, 8
				p.AbortedTransactions = append(p.AbortedTransactions, at)
			}
			topic.Partitions = append(topic.Partitions, p)
		}
		res.Topics = append(res.Topics, topic)
		body := res.AppendTo(nil)
		got, err := parseFetchResponse(body, v)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if len(got.Topics) != 1 || got.Topics[0].Topic != "t" || len(got.Topics[0].Partitions) != 2 {
			t.Fatalf("v%d: %+v", v, got)
		}
		p := got.Topics[0].Partitions[1]
		wantLSO, wantAborted := int64(-1), 0
		if v >= 4 {
			wantLSO, wantAborted = 90, 1
		}
		if p.Partition != 1 || p.ErrorCode != 1 || p.HighWatermark != 100 || p.LastStableOffset != wantLSO ||
			len(p.AbortedTransactions) != wantAborted || !bytes.Equal(p.Records, records) {
			t.Fatalf("v%d: partition %+v", v, p)
		}
		if wantAborted > 0 && (p.AbortedTransactions[0].ProducerID != 7 || p.AbortedTransactions[0].FirstOffset != 8) {
			t.Fatalf("v%d: aborted %+v", v, p.AbortedTransactions)
		}
		if got.Topics[0].Partitions[0].Records != nil {
			t.Fatalf("v%d: null records read as %v", v, got.Topics[0].Partitions[0].Records)
		}
		for n := range len(body) {
			if _, err := parseFetchResponse(body[:n], v); err == nil {
				t.Fatalf("v%d: response truncated to %d bytes parsed", v, n)
			}
		}
	}
}
