package harness_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// echoServer is a line echo server on loopback that counts accepted
// connections; it stops in t.Cleanup.
type echoServer struct {
	ln       net.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// dial connects to addr; the connection is closed in t.Cleanup.
func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends line and reads it back within d.
func roundTrip(c net.Conn, r *bufio.Reader, line string, d time.Duration) (string, error) {
	if err := c.SetDeadline(time.Now().Add(d)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func await(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	harness.Await(t, d, what, cond)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxyPassAndCounters(t *testing.T) {
	echo := startEcho(t)
	p := harness.NewProxy(t, echo.ln.Addr().String())
	c, r := dial(t, p.Addr())
	if got, err := roundTrip(c, r, "hello", 5*time.Second); err != nil || got != "hello" {
		t.Fatalf("round trip = %q, %v; want hello", got, err)
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns() = %d, want 1", n)
	}
	// The counters move after each write, which can trail the echo.
	await(t, 5*time.Second, "6 bytes counted each way", func() bool {
		up, down := p.Bytes()
		return up == 6 && down == 6
	})
	_ = c.Close()
	await(t, 5*time.Second, "the closed connection to be forgotten", func() bool { return p.Conns() == 0 })
}

func TestProxyDelay(t *testing.T) {
	echo := startEcho(t)
	p := harness.NewProxy(t, echo.ln.Addr().String())
	c, r := dial(t, p.Addr())
	const d = 100 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if got, err := roundTrip(c, r, "slow", 5*time.Second); err != nil || got != "slow" {
		t.Fatalf("round trip = %q, %v; want slow", got, err)
	}
	// Delayed once each way.
	if took := time.Since(start); took < 2*d {
		t.Fatalf("round trip took %v, want at least %v", took, 2*d)
	}
	p.Pass()
	start = time.Now()
	if _, err := roundTrip(c, r, "fast", 5*time.Second); err != nil {
		t.Fatalf("round trip after Pass: %v", err)
	}
	if took := time.Since(start); took >= d {
		t.Fatalf("round trip after Pass took %v, want under %v", took, d)
	}
}

func TestProxyBlackholeHoldsDataAndDefersDial(t *testing.T) {
	echo := startEcho(t)
	p := harness.NewProxy(t, echo.ln.Addr().String())
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "before", 5*time.Second); err != nil {
		t.Fatalf("round trip: %v", err)
	}

	p.Blackhole()
	if got, err := roundTrip(c, r, "held", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("round trip while blackholed = %q, %v; want a timeout", got, err)
	}
	// A new connection is accepted but the target never hears of it.
	c2, r2 := dial(t, p.Addr())
	if got, err := roundTrip(c2, r2, "new", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("new connection while blackholed = %q, %v; want a timeout", got, err)
	}
	if n := echo.accepted.Load(); n != 1 {
		t.Fatalf("target accepted %d connections while blackholed, want 1", n)
	}

	// The partition heals: held bytes arrive in order and the streams are intact.
	p.Pass()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("held line = %q, %v; want held", got, err)
	}
	if got, err := roundTrip(c, r, "after", 5*time.Second); err != nil || got != "after" {
		t.Fatalf("round trip after Pass = %q, %v; want after", got, err)
	}
	_ = c2.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r2.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("line of the new connection = %q, %v; want new", got, err)
	}
}

func TestProxyCutAndRefuse(t *testing.T) {
	echo := startEcho(t)
	p := harness.NewProxy(t, echo.ln.Addr().String())
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "x", 5*time.Second); err != nil {
		t.Fatalf("round trip: %v", err)
	}

	p.Refuse(true)
	p.Cut()
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns() after Cut = %d, want 0", n)
	}
	if _, err := roundTrip(c, r, "y", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("round trip on a cut connection: %v; want a connection error", err)
	}
	// The reset can hit the dial itself or the first read.
	if c2, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second); err == nil {
		_, err = roundTrip(c2, bufio.NewReader(c2), "z", 5*time.Second)
		_ = c2.Close()
		if err == nil || isTimeout(err) {
			t.Fatalf("round trip while refusing: %v; want a connection error", err)
		}
	}

	p.Refuse(false)
	c3, r3 := dial(t, p.Addr())
	if got, err := roundTrip(c3, r3, "back", 5*time.Second); err != nil || got != "back" {
		t.Fatalf("round trip after Refuse(false) = %q, %v; want back", got, err)
	}
}

// proxiedClient returns an etcd client whose only endpoint is p.
func proxiedClient(t *testing.T, p *harness.Proxy) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Addr()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("proxied client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func TestProxyEtcdBlackholeThenPass(t *testing.T) {
	e := harness.StartEtcd(t, 1)
	p := harness.NewProxy(t, strings.TrimPrefix(e.Endpoint(0), "http://"))
	cli := proxiedClient(t, p)
	if _, err := cli.Put(harness.Context(t, 5*time.Second), "k", "v"); err != nil {
		t.Fatalf("put through proxy: %v", err)
	}

	p.Blackhole()
	if _, err := cli.Get(harness.Context(t, 500*time.Millisecond), "k"); err == nil {
		t.Fatal("get through a blackholed proxy succeeded")
	}

	p.Pass()
	if got := mustGet(t, cli, "k"); got != "v" {
		t.Fatalf("get after Pass = %q, want v", got)
	}
}

func TestProxyEtcdCut(t *testing.T) {
	e := harness.StartEtcd(t, 1)
	p := harness.NewProxy(t, strings.TrimPrefix(e.Endpoint(0), "http://"))
	cli := proxiedClient(t, p)
	if _, err := cli.Put(harness.Context(t, 5*time.Second), "k", "v"); err != nil {
		t.Fatalf("put through proxy: %v", err)
	}
	if n := p.Conns(); n == 0 {
		t.Fatal("Conns() = 0 with a connected client")
	}
	p.Cut()
	// The client reconnects on its own.
	if got := mustGet(t, cli, "k"); got != "v" {
		t.Fatalf("get after Cut = %q, want v", got)
	}
}

func TestProxyEtcdDropResponses(t *testing.T) {
	e := harness.StartEtcd(t, 1)
	direct := e.Client(t)
	p := harness.NewProxy(t, strings.TrimPrefix(e.Endpoint(0), "http://"))
	cli := proxiedClient(t, p)
	if _, err := cli.Put(harness.Context(t, 5*time.Second), "warm", "up"); err != nil {
		t.Fatalf("put through proxy: %v", err)
	}

	p.DropResponses()
	if _, err := cli.Put(harness.Context(t, 500*time.Millisecond), "k", "lost-ack"); err == nil {
		t.Fatal("put through a proxy dropping responses succeeded")
	}
	// The request itself reached etcd: the outcome was only unknown to the client.
	await(t, 5*time.Second, "the put to be visible directly", func() bool {
		return mustGet(t, direct, "k") == "lost-ack"
	})

	p.Pass() // closes the connection whose stream lost bytes
	if got := mustGet(t, cli, "k"); got != "lost-ack" {
		t.Fatalf("get through proxy after Pass = %q, want lost-ack", got)
	}
}
