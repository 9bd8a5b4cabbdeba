package harness

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// CountRequests counts the requests of kind key (a kmsg key, such as
// kmsg.Fetch.Int16()) that the cluster receives from now until it is
// closed, across all brokers. The requests are handled as usual: the
// counter only observes them. A fetch that waits on the broker for records
// counts once. It needs kfake, which shows the broker's side of requests; a
// test of a real cluster counts them on the client's side with a
// RequestCounter.
func (k *Kafka) CountRequests(key int16) *atomic.Int64 {
	if k.cluster == nil {
		panic("harness: CountRequests needs a kfake cluster; count a real cluster's requests with NewRequestCounter")
	}
	var n atomic.Int64
	k.cluster.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
		n.Add(1)
		return nil, nil, false
	})
	return &n
}

// CountRequestBytes is CountRequests and the bytes of the requests' bodies
// as the cluster received them (headers left out).
func (k *Kafka) CountRequestBytes(key int16) (requests, bytes *atomic.Int64) {
	if k.cluster == nil {
		panic("harness: CountRequestBytes needs a kfake cluster")
	}
	requests, bytes = new(atomic.Int64), new(atomic.Int64)
	k.cluster.ControlKey(key, func(req kmsg.Request) (kmsg.Response, error, bool) {
		requests.Add(1)
		bytes.Add(int64(len(req.AppendTo(nil))))
		return nil, nil, false
	})
	return requests, bytes
}

// EtcdRevision is the cluster's current revision, from the header of a Get.
// The revision rises by one with each transaction that changes the store (a
// put or delete, a lease expiry or revocation that deletes keys), and not
// with reads, failed comparisons or lease keepalives: the difference over an
// interval is the number of write transactions in it.
func EtcdRevision(t testing.TB, cli *clientv3.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "\x00", clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("etcd: read revision: %v", err)
	}
	return resp.Header.Revision
}

// EtcdCount is the number of keys below prefix.
func EtcdCount(t testing.TB, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("etcd: count keys below %s: %v", prefix, err)
	}
	return resp.Count
}
