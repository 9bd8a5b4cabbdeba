package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// A client that speaks TLS to a plain listener, or plain to a TLS one, is
// closed on at once, as by a broker that stopped; run tells the two apart
// and exits at once naming the flag, rather than retrying forever.
func TestRunRefusesAListenerOfTheOtherKind(t *testing.T) {
	etcd := harness.StartEtcd(t, 1)
	kf := harness.StartKafka(t, harness.SeedTopics(1, "orders"))
	tlsOnly := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsOnly.Close()
	tlsAddr := strings.TrimPrefix(tlsOnly.URL, "https://")
	for _, tc := range []struct {
		name    string
		args    []string
		want    []string
		wantNot string
	}{
		{"plain client, TLS listener", []string{"--brokers", tlsAddr}, []string{"kafka at " + tlsAddr + " speaks TLS", "--kafka-tls"}, ""},
		{"TLS client, plain listener", []string{"--brokers", kf.Brokers()[0], "--kafka-tls"},
			[]string{"kafka at " + kf.Brokers()[0] + " does not speak TLS", "drop --kafka-tls"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			args := append([]string{"run", "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--group", "g",
				"--topics", "orders", "--sink", "stdout:", "--http-addr", "127.0.0.1:0"}, tc.args...)
			r := opsRun(t, 30*time.Second, args...)
			if r.code == 0 {
				t.Fatalf("exit 0: %s", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
				}
			}
			t.Logf("exit %d after %s", r.code, time.Since(start).Round(time.Millisecond))
		})
	}
}
