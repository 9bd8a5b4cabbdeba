package harness

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaVersion is the release of Apache Kafka the harness runs: the one
// integration/tools/kafka/pom.xml pins and test.sh fetches.
const KafkaVersion = "4.1.1"

// KafkaLibsEnv names the environment variable holding the folder of Apache
// Kafka's jars, the broker's and its dependencies' (test.sh sets it). When
// it is empty the harness looks in KafkaLibsDefault under the module root.
const KafkaLibsEnv = "KAFKA_LIBS"

// KafkaLibsDefault is where test.sh puts the jars, relative to the
// module's root.
const KafkaLibsDefault = ".cache/kafka/" + KafkaVersion + "/libs"

// kafkaToolsDir holds, relative to the module's root, the brokers' log4j2
// configuration and the sources of the harness's Java programs.
const kafkaToolsDir = "integration/tools/kafka"

// Timing of Apache Kafka's nodes.
const (
	// kafkaStartTimeout bounds a node's start, from its process's start to
	// "Kafka Server started", and a cluster's, to every broker registered.
	kafkaStartTimeout = 2 * time.Minute
	// kafkaStartTries is how many times a start that failed to bind a
	// port is tried again: on new ports for a new cluster, on the same
	// ones for a node started again.
	kafkaStartTries = 5
	// kafkaStopTimeout bounds a controlled shutdown (Terminate).
	kafkaStopTimeout = 2 * time.Minute
)

// kafkaStartedLine is what a node's server.log says once its broker is
// registered and unfenced.
const kafkaStartedLine = "Kafka Server started"

// ApacheKafkaOption configures StartApacheKafka and NewApacheKafka.
type ApacheKafkaOption func(*apacheConfig)

type apacheConfig struct {
	nodes int
	props []string
	codec kgo.CompressionCodec
	scram *SCRAMConfig
	jvm   []string
	// programs: the harness's Java programs on the brokers' classpath.
	programs bool
}

// HarnessPrograms puts the harness's Java programs
// (integration/tools/kafka/java, compiled as RunJava compiles them) on
// every broker's classpath: a plugin of the broker's, such as
// FollowerSelector for replica.selector.class.
func HarnessPrograms() ApacheKafkaOption { return func(c *apacheConfig) { c.programs = true } }

// Nodes sets the number of nodes, each a broker and a controller of the
// KRaft quorum (default 1). On three, topics are replicated three times
// with min.insync.replicas 2, so that a node can be lost.
func Nodes(n int) ApacheKafkaOption { return func(c *apacheConfig) { c.nodes = n } }

// BrokerProperties adds server properties, key, value pairs, to every
// node's server.properties, after (and so over) the harness's own.
func BrokerProperties(kv ...string) ApacheKafkaOption {
	return func(c *apacheConfig) { c.props = append(c.props, kv...) }
}

// Codec sets the codec Produce uses (default none), as Compression does
// for StartKafka.
func Codec(codec kgo.CompressionCodec) ApacheKafkaOption {
	return func(c *apacheConfig) { c.codec = codec }
}

// JVMFlags adds flags to the nodes' java command lines, after (and so
// over) kafkaJVMFlags: e.g. "-Xmx1g", or "-XX:TieredStopAtLevel=4" for
// C2's throughput in a benchmark.
func JVMFlags(flags ...string) ApacheKafkaOption {
	return func(c *apacheConfig) { c.jvm = append(c.jvm, flags...) }
}

// apacheKafka is the Apache Kafka behind a Kafka: its nodes' processes and
// files.
type apacheKafka struct {
	cfg       apacheConfig
	libs      string // folder of the jars
	java      string // the java command
	log4j     string // the brokers' log4j2.properties
	sources   string // folder of the Java programs' sources
	dir       string // the cluster's folder, removed at close
	clusterID string
	nodes     []*KafkaNode
	tls       *kafkaTLS     // nil without SASLSCRAMOverTLS
	cds       string        // class data sharing archive, or ""
	admin     *kgo.Client   // the helpers' admin client (Kafka.admin)
	next      atomic.Uint32 // rotates the nodes that requests go to
	closed    atomic.Bool
}

// KafkaLibs finds the folder of Apache Kafka's jars: the one in
// KAFKA_LIBS, else KafkaLibsDefault under the module root; or returns an
// error that says what is missing.
func KafkaLibs() (string, error) {
	dir := os.Getenv(KafkaLibsEnv)
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, KafkaLibsDefault)
		if _, err := os.Stat(dir); err != nil {
			return "", fmt.Errorf("no Apache Kafka jars: %s unset and %s missing (./test.sh fetches them with mvn)", KafkaLibsEnv, dir)
		}
	}
	jars, _ := filepath.Glob(filepath.Join(dir, "kafka_2.13-*.jar"))
	if len(jars) == 0 {
		return "", fmt.Errorf("no Apache Kafka jars: no kafka_2.13-*.jar in %s (%s)", dir, KafkaLibsEnv)
	}
	return dir, nil
}

// apacheKafkaTools finds the jars and java, or says what is missing.
func apacheKafkaTools() (libs, java string, err error) {
	if libs, err = KafkaLibs(); err != nil {
		return "", "", err
	}
	if java, err = exec.LookPath("java"); err != nil {
		return "", "", fmt.Errorf("no java to run Apache Kafka: %w", err)
	}
	return libs, java, nil
}

// RequireApacheKafka returns the folder of Apache Kafka's jars, or skips
// the test when they or java are missing, except in CI (CI set in the
// environment), where that fails the test: there it must run.
func RequireApacheKafka(t testing.TB) string {
	t.Helper()
	libs, _, err := apacheKafkaTools()
	skipUnlessCI(t, err, "kafka", "Apache Kafka")
	return libs
}

// StartApacheKafka starts a cluster of Apache Kafka for one test (see
// NewApacheKafka), stopped in t.Cleanup; it skips the test as
// RequireApacheKafka does, and fails it if the cluster does not start.
func StartApacheKafka(t testing.TB, opts ...ApacheKafkaOption) *Kafka {
	t.Helper()
	RequireApacheKafka(t)
	start := time.Now()
	k, err := NewApacheKafka(opts...)
	if err != nil {
		t.Fatalf("kafka: %v", err)
	}
	t.Logf("kafka: %d node(s) of Apache Kafka %s started in %v", len(k.real.nodes), KafkaVersion, time.Since(start).Round(time.Millisecond))
	k.shared = false
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kafka: logs of the nodes (tails):\n%s", k.real.logs())
		}
		k.Close()
	})
	return k
}

// NewApacheKafka starts a cluster of Apache Kafka that no test owns: for
// a package's tests to share, started once and closed (Close) after them:
//
//	var kafka struct {
//		once sync.Once
//		k    *harness.Kafka
//		err  error
//	}
//
//	func sharedKafka(t *testing.T) *harness.Kafka {
//		harness.RequireApacheKafka(t)
//		kafka.once.Do(func() { kafka.k, kafka.err = harness.NewApacheKafka(harness.Nodes(3)) })
//		if kafka.err != nil {
//			t.Fatal(kafka.err)
//		}
//		return kafka.k
//	}
//
// and in TestMain, after m.Run, `if kafka.k != nil { kafka.k.Close() }`.
// The helpers that take a t work on it as on a cluster of one test; the
// clients they make for a test are closed at its end. A test that takes
// nodes away restores the cluster with AwaitHealthy.
//
// Each node is one process, `java -cp 'libs/*' kafka.Kafka`, a broker
// and a controller of a static KRaft quorum, on free 127.0.0.1 ports: a
// PLAINTEXT listener for clients (Brokers) and the other brokers, and a
// CONTROLLER one. Its data, configuration and server.log are in a new
// temporary folder, removed by Close. Nodes are formatted with one cluster
// id, all started, and awaited: each says "Kafka Server started", then a
// metadata request sees every broker. On 2 cores a cluster of one node
// starts in 1 to 1.5 s, one of three in 3 to 4 s, formatting included (the
// first start on a machine takes some 4 s more, to make the class data
// sharing archive of sharedArchive). Each node is some 230 MiB resident.
// The JVMs die with the test process (PR_SET_PDEATHSIG) if it exits
// before Close.
//
// Defaults that differ from Kafka's, for tests (see brokerProperties):
// internal topics of 3 partitions, group.initial.rebalance.delay.ms 0,
// brokers fenced 4 s after their last heartbeat (not 9), a quorum's first
// election after 0.5 s, small buffers and few threads. Topics are
// replicated min(3, nodes) times, min.insync.replicas is min(2, nodes);
// auto.create.topics.enable stays on, as on a real cluster.
func NewApacheKafka(opts ...ApacheKafkaOption) (*Kafka, error) {
	cfg := apacheConfig{nodes: 1, codec: kgo.NoCompression()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.nodes < 1 || cfg.nodes > 9 {
		return nil, fmt.Errorf("apache kafka: %d nodes: 1 to 9 are supported", cfg.nodes)
	}
	if len(cfg.props)%2 != 0 {
		return nil, fmt.Errorf("apache kafka: broker properties %q: must be key, value pairs", cfg.props)
	}
	if err := cfg.scram.validate(); err != nil {
		return nil, fmt.Errorf("apache kafka: %w", err)
	}
	libs, java, err := apacheKafkaTools()
	if err != nil {
		return nil, fmt.Errorf("apache kafka: %w", err)
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, fmt.Errorf("apache kafka: %w", err)
	}
	a := &apacheKafka{
		cfg:     cfg,
		libs:    libs,
		java:    java,
		log4j:   filepath.Join(root, kafkaToolsDir, "log4j2.properties"),
		sources: filepath.Join(root, kafkaToolsDir, "java"),
	}
	if _, err := os.Stat(a.log4j); err != nil {
		return nil, fmt.Errorf("apache kafka: the brokers' log4j2 configuration: %w", err)
	}
	if a.dir, err = os.MkdirTemp("", "offsetkeeper-kafka-"); err != nil {
		return nil, fmt.Errorf("apache kafka: %w", err)
	}
	if err := a.start(); err != nil {
		logs := a.logs()
		a.close()
		return nil, fmt.Errorf("apache kafka: start %d node(s): %w\n%s", cfg.nodes, err, logs)
	}
	k := &Kafka{real: a, codec: cfg.codec, shared: true}
	for _, n := range a.nodes {
		k.brokers = append(k.brokers, n.Addr())
	}
	if err := a.awaitBrokers(k); err != nil {
		logs := a.logs()
		k.Close()
		return nil, fmt.Errorf("apache kafka: %w\n%s", err, logs)
	}
	return k, nil
}

// start formats and starts the nodes and waits until each says it
// started. Free ports are picked by binding :0 and closing, so another
// process can take one first: then it starts again, on new ports.
func (a *apacheKafka) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), kafkaStartTimeout)
	defer cancel()
	a.cds = a.sharedArchive(ctx)
	if a.cfg.programs {
		if _, err := compileJava(javaEnv{java: a.java, libs: a.libs, log4j: a.log4j, sources: a.sources, cds: a.cds}); err != nil {
			return err
		}
	}
	if a.cfg.scram != nil {
		var err error
		if a.tls, err = newKafkaTLS(filepath.Join(a.dir, "tls")); err != nil {
			return err
		}
	}
	a.clusterID = newClusterID()
	a.nodes = make([]*KafkaNode, a.cfg.nodes)
	for i := range a.nodes {
		a.nodes[i] = &KafkaNode{c: a, id: int32(i), dir: filepath.Join(a.dir, fmt.Sprintf("node%d", i))}
	}
	for try := 1; ; try++ {
		err := a.startOnce(ctx)
		if err == nil {
			return nil
		}
		bind := false
		for _, n := range a.nodes {
			bind = bind || n.bindFailed()
			n.Kill()
		}
		if !bind || try == kafkaStartTries || ctx.Err() != nil {
			return err
		}
		for _, n := range a.nodes {
			if err := os.RemoveAll(n.dir); err != nil {
				return err
			}
		}
	}
}

// startOnce picks ports, writes every node's configuration, formats every
// node, starts them all and then waits for each: a node of a quorum of
// three waits for a majority of controllers before it says it started.
func (a *apacheKafka) startOnce(ctx context.Context) error {
	ports, err := freePorts(len(a.nodes) * 3)
	if err != nil {
		return err
	}
	for i, n := range a.nodes {
		n.port, n.controllerPort, n.saslPort = ports[3*i], ports[3*i+1], ports[3*i+2]
	}
	for _, n := range a.nodes {
		if err := n.configure(); err != nil {
			return fmt.Errorf("node %d: %w", n.id, err)
		}
	}
	errs := make([]error, len(a.nodes))
	var wg sync.WaitGroup
	for i, n := range a.nodes {
		wg.Go(func() { errs[i] = n.format(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	procs := make([]*kafkaProcess, len(a.nodes))
	for i, n := range a.nodes {
		if procs[i], err = n.launch(); err != nil {
			return fmt.Errorf("node %d: %w", n.id, err)
		}
	}
	// A node that exits (one that could not bind its ports) ends the wait
	// for the others, which may never get their quorum.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, n := range a.nodes {
		wg.Go(func() {
			if errs[i] = n.awaitStarted(wctx, procs[i]); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// awaitBrokers waits until a metadata request sees every broker, and keeps
// the client as the helpers' admin client.
func (a *apacheKafka) awaitBrokers(k *Kafka) error {
	cl, err := k.dial()
	if err != nil {
		return err
	}
	k.admin, a.admin = cl, cl
	ctx, cancel := context.WithTimeout(context.Background(), kafkaStartTimeout)
	defer cancel()
	for {
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{}
		resp, err := a.request(ctx, cl, req)
		if err == nil {
			if got := len(resp.(*kmsg.MetadataResponse).Brokers); got == len(a.nodes) {
				return nil
			} else {
				err = fmt.Errorf("metadata lists %d of %d brokers", got, len(a.nodes))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("brokers did not all register in %v: %w", kafkaStartTimeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// clientOpts are options of every kgo client of the cluster: a leader
// that moves is looked up again at once, not after kgo's 5 s.
func (a *apacheKafka) clientOpts() []kgo.Opt {
	return []kgo.Opt{kgo.MetadataMinAge(100 * time.Millisecond)}
}

// newClusterID is a random cluster id, as `kafka-storage random-uuid`
// prints: 16 bytes in URL-safe base64 without padding, never starting with
// '-' (the formatter would take it for an option), as Kafka's own.
func newClusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		b[6] = b[6]&0x0f | 0x40 // a version 4 UUID: never one of Kafka's reserved ids
		b[8] = b[8]&0x3f | 0x80
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// freePorts finds n distinct free loopback ports (see freePort).
func freePorts(n int) ([]int, error) {
	seen := make(map[int]bool)
	var ports []int
	for len(ports) < n {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// logs are the tails of the nodes' logs, for a failure's message.
func (a *apacheKafka) logs() string {
	var b strings.Builder
	for _, n := range a.nodes {
		if n != nil {
			b.WriteString(a.logsOf(n))
		}
	}
	return b.String()
}

// tail is the end of the file at path, at most n bytes.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(0, st.Size()-n)
	b := make([]byte, st.Size()-off)
	m, _ := f.ReadAt(b, off)
	return string(b[:m])
}

// close kills the nodes and removes the cluster's folder.
func (a *apacheKafka) close() {
	a.closed.Store(true)
	for _, n := range a.nodes {
		if n != nil {
			n.Kill()
		}
	}
	_ = os.RemoveAll(a.dir)
}
