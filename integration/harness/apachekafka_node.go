package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaNode is one node of an Apache Kafka cluster, a broker and a
// controller in one process, which a test can crash (Kill), stop
// (Terminate), freeze (Pause, Resume) and start again (Start) on the same
// data and ports. Its methods may be called from any goroutine.
type KafkaNode struct {
	c   *apacheKafka
	id  int32
	dir string // server.properties, data/, logs/server.log, stdout.log
	// The ports of its PLAINTEXT, CONTROLLER and SASL_SSL (with
	// SASLSCRAMOverTLS) listeners.
	port, controllerPort, saslPort int

	mu     sync.Mutex
	proc   *kafkaProcess // nil when not running
	paused bool
	// Where the last process's output starts in server.log and in
	// stdout.log: what it said is what follows.
	logFrom, outFrom int64
}

// kafkaProcess is one run of a node.
type kafkaProcess struct {
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // of Wait, set before done is closed
	logFrom int64 // size of server.log at the start
}

// Nodes is the number of nodes of Apache Kafka (of kfake: brokers).
func (k *Kafka) Nodes() int {
	if k.real == nil {
		return len(k.brokers)
	}
	return len(k.real.nodes)
}

// Node is the node of Apache Kafka whose id is i, from 0 to Nodes()-1: ids
// are indexes, so that Node(int(k.Leader(t, topic, p))) is the leader. It
// panics on kfake's cluster, or on an i out of range: both are mistakes of
// the test.
func (k *Kafka) Node(i int) *KafkaNode {
	if k.real == nil {
		panic("kafka: Node on kfake's cluster: nodes are Apache Kafka's (StartApacheKafka)")
	}
	if i < 0 || i >= len(k.real.nodes) {
		panic(fmt.Sprintf("kafka: node %d of a cluster of %d", i, len(k.real.nodes)))
	}
	return k.real.nodes[i]
}

// ID is the node's node.id, its broker id.
func (n *KafkaNode) ID() int32 { return n.id }

// Addr is the host:port of the node's PLAINTEXT listener.
func (n *KafkaNode) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

// SASLAddr is the host:port of the node's SASL_SSL listener, "" without
// SASLSCRAMOverTLS.
func (n *KafkaNode) SASLAddr() string {
	if n.c.tls == nil {
		return ""
	}
	return fmt.Sprintf("127.0.0.1:%d", n.saslPort)
}

// PID is the process ID of the node's JVM, or 0 when it is not running.
func (n *KafkaNode) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running() {
		return 0
	}
	return n.proc.cmd.Process.Pid
}

// Running tells whether the node's process runs (paused or not).
func (n *KafkaNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running()
}

// running: started, not killed, and not exited on its own; n.mu is held.
func (n *KafkaNode) running() bool {
	if n.proc == nil {
		return false
	}
	select {
	case <-n.proc.done:
		return false
	default:
		return true
	}
}

// Kill kills the node (SIGKILL), as a crash: its connections are cut at
// once, its leaderships move when the controllers fence it (some 4 s
// later), and it is gone when Kill returns. No-op when not running.
func (n *KafkaNode) Kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.kill()
}

// kill kills the process and waits for it; n.mu is held.
func (n *KafkaNode) kill() {
	if n.proc == nil {
		return
	}
	p := n.proc
	n.proc, n.paused = nil, false
	// Its group: the JVM leads it (Setpgid), and a stopped process dies
	// of SIGKILL too.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Terminate stops the node with SIGTERM, Kafka's controlled shutdown
// (its leaderships move away first), and waits until it is gone. If that
// takes longer than kafkaStopTimeout (a controlled shutdown waits for the
// quorum: the last nodes of a cluster may not get one), the node is killed
// and Terminate says so. No-op when not running.
func (n *KafkaNode) Terminate() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running() {
		n.kill() // reaps one that exited on its own
		return nil
	}
	p := n.proc
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if n.paused {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-p.done:
		n.proc, n.paused = nil, false
		return nil
	case <-time.After(kafkaStopTimeout):
		n.kill()
		return fmt.Errorf("kafka node %d: no controlled shutdown in %v: killed", n.id, kafkaStopTimeout)
	}
}

// Pause freezes the node (SIGSTOP): its connections stay open but nothing
// answers, and the controllers fence it some 4 s later. No-op when not
// running.
func (n *KafkaNode) Pause() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running() && !n.paused {
		_ = n.proc.cmd.Process.Signal(syscall.SIGSTOP)
		n.paused = true
	}
}

// Resume resumes the paused node (SIGCONT). No-op when not paused.
func (n *KafkaNode) Resume() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running() && n.paused {
		_ = n.proc.cmd.Process.Signal(syscall.SIGCONT)
		n.paused = false
	}
}

// Paused tells whether the node is paused.
func (n *KafkaNode) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running() && n.paused
}

// Start starts the killed (or terminated, or exited) node again on the
// same data and ports, and waits until it says "Kafka Server started" and
// every running node lists its broker, registered and unfenced. A paused
// node is resumed. No-op when running.
func (n *KafkaNode) Start() error {
	if err := n.startProcess(); err != nil {
		return fmt.Errorf("kafka node %d: start: %w\n%s", n.id, err, n.c.logsOf(n))
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkaStartTimeout)
	defer cancel()
	err := awaitEachNode(ctx, n.c, metadataOf(), func(resp *kmsg.MetadataResponse) error {
		for _, b := range resp.Brokers {
			if b.NodeID == n.id {
				return nil
			}
		}
		return fmt.Errorf("broker %d not in the metadata", n.id)
	})
	if err != nil {
		return fmt.Errorf("kafka node %d: start: %w", n.id, err)
	}
	return nil
}

// startProcess starts the process and waits until it says it started. Its
// ports are free again, but an outgoing connection may have been given
// one as its local port meanwhile: a start that fails to bind is tried
// again for a while.
func (n *KafkaNode) startProcess() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.c.closed.Load() {
		return errors.New("the cluster is closed")
	}
	if n.running() {
		if n.paused {
			_ = n.proc.cmd.Process.Signal(syscall.SIGCONT)
			n.paused = false
		}
		return nil
	}
	n.kill() // reaps one that exited on its own
	ctx, cancel := context.WithTimeout(context.Background(), kafkaStartTimeout)
	defer cancel()
	for try := 1; ; try++ {
		p, err := n.launchLocked()
		if err == nil {
			if err = n.awaitStarted(ctx, p); err == nil {
				return nil
			}
		}
		n.kill()
		if !n.bindFailed() || try == kafkaStartTries || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// launch starts the node's process, without waiting for it.
func (n *KafkaNode) launch() (*kafkaProcess, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.launchLocked()
}

// launchLocked starts the node's process; n.mu is held. Its output is
// appended to stdout.log, and log4j2 appends to server.log: what a node
// said before it was killed is kept.
func (n *KafkaNode) launchLocked() (*kafkaProcess, error) {
	n.logFrom, n.outFrom = fileSize(n.serverLog()), fileSize(n.stdoutPath())
	out, err := os.OpenFile(n.stdoutPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	flags := append(append([]string(nil), kafkaJVMFlags...), n.c.cfg.jvm...)
	cmd := n.c.command(context.Background(), n.logDir(), flags, "kafka.Kafka", n.propertiesPath())
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run java: %w", err)
	}
	p := &kafkaProcess{cmd: cmd, done: make(chan struct{}), logFrom: n.logFrom}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	n.proc, n.paused = p, false
	return p, nil
}

// awaitStarted waits until p says "Kafka Server started" in server.log,
// exits, or ctx ends.
func (n *KafkaNode) awaitStarted(ctx context.Context, p *kafkaProcess) error {
	marker := []byte(kafkaStartedLine)
	from := p.logFrom
	for {
		if b := readFrom(n.serverLog(), from); len(b) > 0 {
			if bytes.Contains(b, marker) {
				return nil
			}
			from += max(0, int64(len(b)-len(marker)))
		}
		select {
		case <-p.done:
			if bytes.Contains(readFrom(n.serverLog(), from), marker) {
				return fmt.Errorf("node %d exited (%v) after it started", n.id, p.err)
			}
			return fmt.Errorf("node %d exited (%v) before it started", n.id, p.err)
		case <-ctx.Done():
			return fmt.Errorf("node %d did not start: %w", n.id, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// bindFailed tells whether the node's last process failed to bind a port.
func (n *KafkaNode) bindFailed() bool {
	const inUse = "Address already in use"
	return bytes.Contains(readFrom(n.serverLog(), n.logFrom), []byte(inUse)) ||
		bytes.Contains(readFrom(n.stdoutPath(), n.outFrom), []byte(inUse))
}

func (n *KafkaNode) propertiesPath() string { return filepath.Join(n.dir, "server.properties") }
func (n *KafkaNode) dataDir() string        { return filepath.Join(n.dir, "data") }
func (n *KafkaNode) logDir() string         { return filepath.Join(n.dir, "logs") }
func (n *KafkaNode) serverLog() string      { return filepath.Join(n.logDir(), "server.log") }
func (n *KafkaNode) stdoutPath() string     { return filepath.Join(n.dir, "stdout.log") }

// logsOf is the tails of one node's logs.
func (a *apacheKafka) logsOf(n *KafkaNode) string {
	s := fmt.Sprintf("--- node %d: server.log (tail)\n%s\n", n.id, tail(n.serverLog(), 3000))
	if out := tail(n.stdoutPath(), 1000); strings.TrimSpace(out) != "" {
		s += fmt.Sprintf("--- node %d: stdout and stderr (tail)\n%s\n", n.id, out)
	}
	return s
}

// liveNodes are the nodes that run and are not paused.
func (a *apacheKafka) liveNodes() []*KafkaNode {
	var live []*KafkaNode
	for _, n := range a.nodes {
		n.mu.Lock()
		if n.running() && !n.paused {
			live = append(live, n)
		}
		n.mu.Unlock()
	}
	return live
}

// fileSize is the size of the file at path, 0 if it is missing.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// readFrom is the file at path from offset on; nil if it is missing.
func readFrom(path string, offset int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() <= offset {
		return nil
	}
	b := make([]byte, st.Size()-offset)
	m, _ := f.ReadAt(b, offset)
	return b[:m]
}
