package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// javaRunTimeout bounds one run of a Java program (RunJava).
const javaRunTimeout = 3 * time.Minute

// javaCommand is `java FLAGS -cp LIBS/*[:extraCP] ARGS` with log4j2
// configured to log into logDir and, when cds is set, the class data
// sharing archive (an archive that does not match is ignored). The process
// leads a process group of its own and is killed if the test process dies
// (PR_SET_PDEATHSIG), so that no JVM outlives the tests.
func javaCommand(ctx context.Context, java, libs, log4j, cds, logDir, extraCP string, flags []string, args ...string) *exec.Cmd {
	cp := filepath.Join(libs, "*")
	if extraCP != "" {
		cp += string(os.PathListSeparator) + extraCP
	}
	all := append([]string(nil), flags...)
	if cds != "" {
		all = append(all, "-XX:SharedArchiveFile="+cds, "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off")
	}
	all = append(all, "-Dlog4j2.configurationFile="+log4j, "-Dkafka.logs.dir="+logDir, "-cp", cp)
	cmd := exec.CommandContext(ctx, java, append(all, args...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// sharedArchive returns the class data sharing archive of the brokers'
// classes (AppCDS), making it first if it is missing: it halves a node's
// start (from some 1.5 s of CPU to 0.9). It is made once per machine, by a
// throwaway node that writes it when it stops (-XX:ArchiveClassesAtExit),
// into .cache/kafka/cds under the module root, named by a hash of java, the
// jars and the JVM flags; a lock keeps test processes from making it at
// once. Without one ("" when it cannot be made), nodes start all the same.
func (a *apacheKafka) sharedArchive(ctx context.Context) string {
	root, err := moduleRoot()
	if err != nil {
		return ""
	}
	dir := filepath.Join(root, ".cache", "kafka", "cds")
	key, err := archiveKey(a.java, a.libs)
	if err != nil {
		return ""
	}
	path := filepath.Join(dir, "broker-"+key+".jsa")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ""
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return ""
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil {
		return path // made by another process meanwhile
	}
	if err := a.dumpArchive(ctx, path); err != nil {
		return ""
	}
	return path
}

// dumpArchive starts a node of one, in a folder of its own, that writes
// the archive at path when it stops.
func (a *apacheKafka) dumpArchive(ctx context.Context, path string) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	d := &apacheKafka{
		cfg:       apacheConfig{nodes: 1, jvm: []string{"-XX:ArchiveClassesAtExit=" + tmp, "-Xlog:cds=off", "-Xlog:cds+dynamic=off"}},
		libs:      a.libs,
		java:      a.java,
		log4j:     a.log4j,
		dir:       filepath.Join(a.dir, "cds"),
		clusterID: newClusterID(),
	}
	defer os.RemoveAll(d.dir)
	n := &KafkaNode{c: d, id: 0, dir: filepath.Join(d.dir, "node0")}
	d.nodes = []*KafkaNode{n}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	n.port, n.controllerPort, n.saslPort = ports[0], ports[1], ports[2]
	if err := n.configure(); err != nil {
		return err
	}
	if err := n.format(ctx); err != nil {
		return err
	}
	p, err := n.launch()
	if err != nil {
		return err
	}
	err = n.awaitStarted(ctx, p)
	if err == nil {
		err = n.Terminate()
	}
	n.Kill()
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if _, err := os.Stat(tmp); err != nil {
		return fmt.Errorf("no archive written: %w", err)
	}
	return os.Rename(tmp, path)
}

// archiveKey names an archive by what makes it valid: java, the jars, the
// brokers' JVM flags.
func archiveKey(java, libs string) (string, error) {
	h := sha256.New()
	real, err := filepath.EvalSymlinks(java)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "%s %d %d\n", real, st.Size(), st.ModTime().UnixNano())
	jars, err := filepath.Glob(filepath.Join(libs, "*.jar"))
	if err != nil {
		return "", err
	}
	sort.Strings(jars)
	for _, j := range jars {
		st, err := os.Stat(j)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d %d\n", j, st.Size(), st.ModTime().UnixNano())
	}
	fmt.Fprintln(h, strings.Join(kafkaJVMFlags, " "))
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// lockFile takes an exclusive lock of the file at path (flock), waiting
// until ctx ends, and returns its release.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// javaEnv is what runs the harness's Java programs.
type javaEnv struct {
	java, libs, log4j, sources, cds string
}

// javaEnv is the cluster's, or, on kfake's cluster, found anew: the
// programs are Kafka clients, and run against kfake too. It skips t as
// RequireApacheKafka does when the jars or java are missing.
func (k *Kafka) javaEnv(t testing.TB) javaEnv {
	t.Helper()
	if k.real != nil {
		return javaEnv{java: k.real.java, libs: k.real.libs, log4j: k.real.log4j, sources: k.real.sources, cds: k.real.cds}
	}
	RequireApacheKafka(t)
	libs, java, err := apacheKafkaTools()
	if err != nil {
		t.Fatalf("kafka: %v", err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("kafka: %v", err)
	}
	return javaEnv{java: java, libs: libs, log4j: filepath.Join(root, kafkaToolsDir, "log4j2.properties"), sources: filepath.Join(root, kafkaToolsDir, "java")}
}

// javaPrograms are the harness's Java programs, compiled once per test
// process (the jars do not change under it).
var javaPrograms struct {
	once    sync.Once
	classes string
	err     error
}

// compileJava compiles the programs of integration/tools/kafka/java with
// javac against the jars, into .cache/kafka/java/HASH under the module
// root, HASH of the sources and the jars' names: a folder made once, then
// reused by every test process until a source changes. It is built aside
// and renamed into place, so test processes may race to build it.
func compileJava(env javaEnv) (string, error) {
	javaPrograms.once.Do(func() {
		javaPrograms.classes, javaPrograms.err = compileJavaOnce(env)
	})
	return javaPrograms.classes, javaPrograms.err
}

func compileJavaOnce(env javaEnv) (string, error) {
	sources, err := filepath.Glob(filepath.Join(env.sources, "*.java"))
	if err != nil || len(sources) == 0 {
		return "", fmt.Errorf("compile the Java programs: no sources in %s (%v)", env.sources, err)
	}
	sort.Strings(sources)
	h := sha256.New()
	for _, s := range sources {
		b, err := os.ReadFile(s)
		if err != nil {
			return "", fmt.Errorf("compile the Java programs: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(s), len(b))
		h.Write(b)
	}
	jars, _ := filepath.Glob(filepath.Join(env.libs, "*.jar"))
	for _, j := range jars {
		fmt.Fprintln(h, filepath.Base(j))
	}
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("compile the Java programs: %w", err)
	}
	cache := filepath.Join(root, ".cache", "kafka", "java")
	dir := filepath.Join(cache, hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	javac, err := exec.LookPath("javac")
	if err != nil {
		return "", fmt.Errorf("compile the Java programs: no javac (a JDK's): %w", err)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("compile the Java programs: %w", err)
	}
	tmp, err := os.MkdirTemp(cache, "build-")
	if err != nil {
		return "", fmt.Errorf("compile the Java programs: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("compile the Java programs: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"--release", "17", "-encoding", "UTF-8", "-d", tmp, "-cp", filepath.Join(env.libs, "*")}, sources...)
	if out, err := exec.CommandContext(ctx, javac, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("compile the Java programs: javac: %w\n%s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(dir); serr != nil {
			return "", fmt.Errorf("compile the Java programs: %w", err)
		}
	}
	return dir, nil
}

// RunJava runs Java class mainClass with args, on Apache Kafka's jars and
// the harness's programs (integration/tools/kafka/java: RefConsumer,
// TxnProducer, compiled on first use), and returns what it printed on
// stdout. Kafka's tools run so too, e.g.
// "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand". It fails t
// if the program exits with an error, or runs for more than 3 minutes,
// showing its stderr and log. On kfake's cluster it needs the jars as
// StartApacheKafka does (and skips t without them, outside CI).
func (k *Kafka) RunJava(t testing.TB, mainClass string, args ...string) (stdout string) {
	t.Helper()
	env := k.javaEnv(t)
	classes, err := compileJava(env)
	if err != nil {
		t.Fatalf("kafka: %v", err)
	}
	logDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), javaRunTimeout)
	defer cancel()
	cmd := javaCommand(ctx, env.java, env.libs, env.log4j, env.cds, logDir, classes, kafkaToolJVMFlags, append([]string{mainClass}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kafka: java %s %s: %v (%v)\nstderr:\n%s\nlog (tail):\n%s", mainClass, strings.Join(args, " "), err, ctx.Err(),
			errOut.String(), tail(filepath.Join(logDir, "server.log"), 3000))
	}
	return out.String()
}

// StartJava starts Java class mainClass with args as RunJava runs it, as a
// Process of its own that the test can kill (and is killed at its end):
// e.g. TxnProducer --hang, a producer to SIGKILL in the middle of a
// transaction.
func (k *Kafka) StartJava(t testing.TB, name, mainClass string, args ...string) *Process {
	t.Helper()
	env := k.javaEnv(t)
	classes, err := compileJava(env)
	if err != nil {
		t.Fatalf("kafka: %v", err)
	}
	cmd := javaCommand(context.Background(), env.java, env.libs, env.log4j, env.cds, t.TempDir(), classes, kafkaToolJVMFlags,
		append([]string{mainClass}, args...)...)
	return startCommand(t, name, cmd)
}

// RefRecord is a record as the reference consumer (RefConsumer) delivered
// it: where it is, and enough of it to compare.
type RefRecord struct {
	Partition int32
	Offset    int64
	KeyLen    int    // -1 for a null key
	ValueLen  int    // -1 for a null value
	ValueCRC  uint32 // CRC-32 (IEEE) of the value, 0 for a null one
}

// RefRecordOf is r as RefConsumer prints it, to compare a record read
// otherwise with the reference's.
func RefRecordOf(r *kgo.Record) RefRecord {
	rr := RefRecord{Partition: r.Partition, Offset: r.Offset, KeyLen: -1, ValueLen: -1}
	if r.Key != nil {
		rr.KeyLen = len(r.Key)
	}
	if r.Value != nil {
		rr.ValueLen, rr.ValueCRC = len(r.Value), crc32.ChecksumIEEE(r.Value)
	}
	return rr
}

// ReferenceConsume reads every partition of topic from its start to its
// end (the last stable offset with isolation "read_committed"; the high
// watermark with "read_uncommitted"), as taken when it starts, with Kafka's
// own Java consumer (RefConsumer), and returns the records it delivered,
// ordered by partition and offset: the oracle of what a consumer of that
// isolation level must deliver.
func (k *Kafka) ReferenceConsume(t testing.TB, topic, isolation string) []RefRecord {
	t.Helper()
	out := k.RunJava(t, "RefConsumer", strings.Join(k.brokers, ","), topic, isolation)
	var recs []RefRecord
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r RefRecord
		if _, err := fmt.Sscanf(line, "%d %d %d %d %x", &r.Partition, &r.Offset, &r.KeyLen, &r.ValueLen, &r.ValueCRC); err != nil {
			t.Fatalf("kafka: reference consumer of %s: line %q: %v", topic, line, err)
		}
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
	return recs
}

// JavaProduceOptions configure JavaProduce; see TxnProducer.java.
type JavaProduceOptions struct {
	Topic   string
	Records int
	// Transactional produces in transactions of TxnSize records (default
	// 10), every AbortEvery-th aborted (0: none); else the producer is
	// idempotent, without transactions.
	Transactional   bool
	TransactionalID string // default a random one
	TxnSize         int
	AbortEvery      int
	// Compression is none (the default), gzip, snappy, lz4 or zstd.
	Compression string
	// Partitions: record i goes to partition i % Partitions (default 1).
	Partitions int
	// BatchSize is the producer's batch.size (default Kafka's, 16384).
	BatchSize int
	// ValueSize is the size of each value (default 100). Record i's key is
	// "k<i>", its value "v<i, 9 digits>-" padded with 'x'.
	ValueSize int
}

// JavaProduce produces with Kafka's own Java producer (TxnProducer) and
// returns how many records it committed to each partition (acknowledged,
// when not transactional).
func (k *Kafka) JavaProduce(t testing.TB, o JavaProduceOptions) map[int32]int {
	t.Helper()
	args := []string{"--bootstrap", strings.Join(k.brokers, ","), "--topic", o.Topic, "--records", strconv.Itoa(o.Records)}
	if o.Transactional {
		args = append(args, "--mode", "transactional")
	}
	for _, opt := range []struct {
		name string
		v    int
	}{{"txn-size", o.TxnSize}, {"abort-every", o.AbortEvery}, {"partitions", o.Partitions}, {"batch-size", o.BatchSize}, {"value-size", o.ValueSize}} {
		if opt.v > 0 {
			args = append(args, "--"+opt.name, strconv.Itoa(opt.v))
		}
	}
	if o.TransactionalID != "" {
		args = append(args, "--transactional-id", o.TransactionalID)
	}
	if o.Compression != "" {
		args = append(args, "--compression", o.Compression)
	}
	out := k.RunJava(t, "TxnProducer", args...)
	committed := make(map[int32]int)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var (
			kind string
			p    int32
			n    int
		)
		if _, err := fmt.Sscanf(line, "%s %d %d", &kind, &p, &n); err != nil {
			t.Fatalf("kafka: java producer to %s: line %q: %v", o.Topic, line, err)
		}
		if kind == "committed" {
			committed[p] = n
		}
	}
	return committed
}
