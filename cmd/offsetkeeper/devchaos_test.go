//go:build !nodev

package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/internal/audit"
)

func TestParseFaults(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"all", allFaults},
		{"kill", []string{faultKill}},
		// The menu's order, once each, whatever was written.
		{"drain, kill,drain", []string{faultKill, faultDrain}},
		{"reset,all", allFaults},
	} {
		got, err := parseFaults(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseFaults(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestVerdictFailure(t *testing.T) {
	var v verdict
	v.note("t", 0, 0, 1)
	v.note("t", 0, 1, 2)
	v.note("t", 1, 0, 3)
	if got := v.failure(false); got != "" {
		t.Errorf("duplicates in a file sink: failure %q, want none", got)
	}
	if got, want := v.failure(true), "3 duplicates in a sink that must have none, the first t/0 at offset 1 (2 copies)"; got != want {
		t.Errorf("duplicates in postgres: failure %q, want %q", got, want)
	}
	v.note("t", 1, 7, 0)
	v.note("t", 2, 3, 0)
	if got, want := v.failure(false), "2 records lost, the first t/1 at offset 7"; got != want {
		t.Errorf("lost: failure %q, want %q", got, want)
	}
}

func TestReportFailure(t *testing.T) {
	var b bytes.Buffer
	reportFailure(&b, "1 records lost, the first t/1 at offset 7", 42, []string{"1.0s kill dev-1", "2.0s leader etcd member 0 for 2s"})
	want := "FAILED:  1 records lost, the first t/1 at offset 7\nseed:    42 (--seed 42 repeats the order of the faults)\n" +
		"faults in order:\n  1.0s kill dev-1\n  2.0s leader etcd member 0 for 2s\n"
	if b.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestDevProxy: the proxy passes bytes, holds them while paused, and when
// cut closes its connections and refuses new ones until restored.
func TestDevProxy(t *testing.T) {
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
	p, err := newDevProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()

	c, err := net.Dial("tcp", p.addr())
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

	p.pause()
	if _, err := io.WriteString(c, "b\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if got, err := r.ReadString('\n'); err == nil {
		t.Fatalf("read %q while paused, want nothing", got)
	}
	p.resume()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || !strings.HasSuffix(got, "b\n") {
		t.Fatalf("after resume read %q, %v; want the held b", got, err)
	}

	p.cut(true)
	if _, err := echo("c"); err == nil {
		t.Fatal("a cut connection still echoes")
	}
	c2, err := net.Dial("tcp", p.addr())
	if err == nil {
		_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c2.Read(make([]byte, 1)); err == nil {
			t.Fatal("a new connection while cut was not closed")
		}
		c2.Close()
	}
	p.restore()
	c3, err := net.Dial("tcp", p.addr())
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

// TestAuditVerdict: dev's verdict line counts what the audit found: its
// missing records and extra copies, and records produced past a
// partition's committed offset as lost; it names the first of each.
func TestAuditVerdict(t *testing.T) {
	rep := &audit.Report{Partitions: []audit.Partition{
		{Topic: "events", Partition: 0, Committed: 100, Delivered: 100},
		{Topic: "events", Partition: 1, Committed: 100, Delivered: 100,
			Missing:    audit.Ranges{Count: 3, Ranges: []audit.Range{{From: 7, Next: 10}}},
			Duplicated: audit.Ranges{Count: 2, Ranges: []audit.Range{{From: 20, Next: 22}}}, Copies: 2},
		{Topic: "events", Partition: 2, Committed: 90, Delivered: 90},
	}}
	v := auditVerdict(rep, map[int]int64{0: 100, 1: 100, 2: 100})
	if v.lost != 13 || v.duplicates != 2 || v.delivered != 287 {
		t.Fatalf("lost %d, duplicates %d, delivered %d: want 13, 2, 287", v.lost, v.duplicates, v.delivered)
	}
	if v.firstLost != "events/1 at offset 7" || v.firstDuplicate != "events/1 at offset 20" {
		t.Fatalf("first lost %q, first duplicate %q", v.firstLost, v.firstDuplicate)
	}
	clean := auditVerdict(&audit.Report{Partitions: rep.Partitions[:1]}, map[int]int64{0: 100})
	if clean.lost != 0 || clean.duplicates != 0 || clean.failure(true) != "" {
		t.Fatalf("a clean report gives %+v", clean)
	}
}
