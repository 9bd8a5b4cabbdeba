package harness_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// countingHTTP is an HTTP server that counts the requests it handled,
// by path.
func countingHTTP(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var inserts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.Contains(r.URL.RawQuery, "INSERT") {
			inserts.Add(1)
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv, &inserts
}

func post(client *http.Client, url, query string) error {
	res, err := client.Post(url+"/?query="+query, "text/plain", strings.NewReader("rows"))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return res.Body.Close()
}

func TestInterceptorLoseAnswer(t *testing.T) {
	srv, inserts := countingHTTP(t)
	ic := harness.NewInterceptor(t, strings.TrimPrefix(srv.URL, "http://"))
	url := "http://" + ic.Addr()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	if err := post(client, url, "SELECT"); err != nil {
		t.Fatalf("before arming: %v", err)
	}
	ic.LoseAnswer("query=insert", 1)
	if err := post(client, url, "SELECT"); err != nil {
		t.Fatalf("a request that does not match: %v", err)
	}
	// Another client's connection, open before the loss, is closed with it.
	other, err := net.Dial("tcp", ic.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := post(client, url, "INSERT"); err == nil {
		t.Fatal("the INSERT got its answer")
	}
	if got := inserts.Load(); got != 1 || ic.Lost() != 1 {
		t.Fatalf("the server handled %d INSERTs and %d answers were lost, want 1 and 1", got, ic.Lost())
	}
	_ = other.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := other.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a connection open at the loss: read %v, want it closed", err)
	}
	// Refused until Allow: the test looks at the server first.
	if c, err := net.DialTimeout("tcp", ic.Addr(), time.Second); err == nil {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Error("a new connection was served before Allow")
		}
		_ = c.Close()
	}
	ic.Allow()
	if err := post(client, url, "INSERT"); err != nil {
		t.Fatalf("after Allow, the retry: %v", err)
	}
	if got := inserts.Load(); got != 2 || ic.Lost() != 1 {
		t.Fatalf("the server handled %d INSERTs, %d answers lost; want 2 and 1: the loss is armed once", got, ic.Lost())
	}
}

func TestInterceptorHold(t *testing.T) {
	srv, inserts := countingHTTP(t)
	ic := harness.NewInterceptor(t, strings.TrimPrefix(srv.URL, "http://"))
	url := "http://" + ic.Addr()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	ic.Hold("query=INSERT")
	done := make(chan error, 1)
	go func() { done <- post(client, url, "INSERT") }()
	harness.Await(t, 5*time.Second, "the INSERT to be held whole", func() bool {
		h := ic.Holding()
		return len(h) == 1 && strings.HasSuffix(string(h[0]), "rows")
	})
	if got := inserts.Load(); got != 0 {
		t.Fatalf("the server handled %d INSERTs while it was held", got)
	}
	// Another client's other requests pass meanwhile.
	other := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer other.CloseIdleConnections()
	if err := post(other, url, "SELECT"); err != nil {
		t.Fatalf("a request that does not match, while one is held: %v", err)
	}
	ic.Release()
	if err := <-done; err != nil {
		t.Fatalf("the held INSERT, released: %v", err)
	}
	if got := inserts.Load(); got != 1 {
		t.Fatalf("the server handled %d INSERTs, want 1", got)
	}
	if a := ic.Answers(); len(a) != 1 || !strings.HasPrefix(a[0], "HTTP/1.1 200") {
		t.Fatalf("answers to the released request %q, want one HTTP 200", a)
	}
}
