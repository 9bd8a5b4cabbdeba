package netproxy

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// A request in parts, the server speaking between them (as ClickHouse
// sends a progress packet between an INSERT's data and the block that
// ends it): LoseAnswer counting the server's second reply reaches it
// before the client is done, and the cut must wait until the client has
// sent everything. The server gets the whole request; the client gets
// none of the answer and sees its connection closed.
func TestLoseAnswerWaitsForTheWholeRequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		var lines []string
		for _, reply := range []string{"header\n", "progress\n", "done\n"} {
			line, err := r.ReadString('\n')
			if err != nil {
				break
			}
			lines = append(lines, strings.TrimSpace(line))
			if _, err := c.Write([]byte(reply)); err != nil {
				break
			}
		}
		got <- lines
	}()

	ic, err := NewInterceptor(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	ic.LoseAnswer("insert", 2)
	c, err := net.Dial("tcp", ic.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	if _, err := c.Write([]byte("insert\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "header\n" {
		t.Fatalf("first reply %q, %v; want the header", line, err)
	}
	if _, err := c.Write([]byte("data\n")); err != nil {
		t.Fatal(err)
	}
	// The server's "progress" comes back while the client is still
	// sending (it does not wait for it).
	time.Sleep(50 * time.Millisecond)
	if _, err := c.Write([]byte("end\n")); err != nil {
		t.Fatalf("the connection was cut before the request was whole: %v", err)
	}
	if rest, err := r.ReadString('\n'); err == nil {
		t.Fatalf("the client got %q: the answer was not lost", rest)
	}
	select {
	case lines := <-got:
		if strings.Join(lines, " ") != "insert data end" {
			t.Fatalf("the server got %q, want the whole request: insert data end", lines)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not finish")
	}
	if ic.Lost() != 1 {
		t.Fatalf("Lost = %d, want 1", ic.Lost())
	}
}
