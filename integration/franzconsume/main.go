// Command franzconsume is the franz-go anchor of the scale benchmarks: a
// kgo group consumer that reads a topic from the start, commits after each
// poll (auto-commit off, CommitUncommittedOffsets) and drops the records. It
// runs as a process of its own so that its CPU time is its own, apart from
// the in-process broker of the benchmark. Once it has read and committed
// -records records it prints one JSON line to stdout,
//
//	{"records":N,"seconds":S,"cpu_seconds":C}
//
// S and C counted from before the client is made (the group join is
// included) to after the last commit, and exits 0. Any error exits 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap brokers, comma-separated host:port")
	topic := flag.String("topic", "", "topic to consume")
	group := flag.String("group", "", "consumer group")
	records := flag.Int64("records", 0, "records to read before stopping")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if *topic == "" || *group == "" || *records <= 0 {
		fmt.Fprintln(os.Stderr, "franzconsume: -topic, -group and -records > 0 are required")
		os.Exit(2)
	}
	res, err := consume(strings.Split(*brokers, ","), *topic, *group, *records, *timeout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "franzconsume: %v\n", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintf(os.Stderr, "franzconsume: %v\n", err)
		os.Exit(1)
	}
}

// result is the line printed at the end.
type result struct {
	Records    int64   `json:"records"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

func consume(brokers []string, topic, group string, want int64, timeout time.Duration) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cpu0, start := selfCPU(), time.Now()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		return result{}, fmt.Errorf("new client: %w", err)
	}
	defer cl.Close()
	var got int64
	for got < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return result{}, fmt.Errorf("consume %s: %d of %d records: %w", topic, got, want, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("fetch %s/%d: %w", t, p, err))
		})
		if ferr != nil {
			return result{}, ferr
		}
		got += int64(fs.NumRecords())
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			return result{}, fmt.Errorf("commit %s at %d records: %w", topic, got, err)
		}
	}
	return result{Records: got, Seconds: time.Since(start).Seconds(), CPUSeconds: (selfCPU() - cpu0).Seconds()}, nil
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
