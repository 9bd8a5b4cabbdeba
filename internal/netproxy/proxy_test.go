package netproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestProxyAsDevUsesIt: the proxy passes bytes, holds them while
// blackholed (a paused replica), and when cut and refusing closes its
// connections and refuses new ones until Refuse(false).
func TestProxyAsDevUsesIt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // echo server; ends when ln closes
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	p, err := New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	echo := func(s string) (string, error) {
		if _, err := io.WriteString(c, s+"\n"); err != nil {
			return "", err
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		return r.ReadString('\n')
	}
	if got, err := echo("a"); err != nil || got != "a\n" {
		t.Fatalf("echo through the proxy = %q, %v", got, err)
	}

	p.Blackhole()
	if _, err := io.WriteString(c, "b\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if got, err := r.ReadString('\n'); err == nil {
		t.Fatalf("read %q while paused, want nothing", got)
	}
	p.Pass()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || !strings.HasSuffix(got, "b\n") {
		t.Fatalf("after resume read %q, %v; want the held b", got, err)
	}

	p.Refuse(true)
	if n := p.Cut(); n != 1 {
		t.Fatalf("Cut() = %d, want 1 connection cut", n)
	}
	if _, err := echo("c"); err == nil {
		t.Fatal("a cut connection still echoes")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c2.Read(make([]byte, 1)); err == nil {
			t.Fatal("a new connection while cut was not closed")
		}
		c2.Close()
	}
	p.Refuse(false)
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := io.WriteString(c3, "d\n"); err != nil {
		t.Fatal(err)
	}
	_ = c3.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := bufio.NewReader(c3).ReadString('\n'); err != nil || got != "d\n" {
		t.Fatalf("after restore echo = %q, %v", got, err)
	}
}

// TestDialerCut: a Dialer's Cut closes its connections and says how many,
// its dials fail with ErrCut until Restore.
func TestDialerCut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accepts and holds; ends when ln closes
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	d := NewDialer()
	ctx := context.Background()
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := d.Cut(); n != 1 {
		t.Fatalf("Cut() = %d, want 1", n)
	}
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("a cut connection still writes")
	}
	if _, err := d.DialContext(ctx, "tcp", ln.Addr().String()); !errors.Is(err, ErrCut) {
		t.Fatalf("dial while cut: %v, want ErrCut", err)
	}
	d.Restore()
	c2, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial after Restore: %v", err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if n := d.Cut(); n != 0 {
		t.Fatalf("Cut() after the connection closed = %d, want 0", n)
	}
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
