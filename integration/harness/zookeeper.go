package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// ZooKeeper is an Apache ZooKeeper server (one node, standalone) run as a
// process from the jars test.sh fetches from Maven Central into
// $ZOOKEEPER_LIBS (integration/tools/zookeeper/pom.xml): what ClickHouse's
// Kafka engine keeps its offsets in with kafka_keeper_path (SetKeeper).
type ZooKeeper struct {
	proc *Process
	port int
}

// StartZooKeeper starts a ZooKeeper on a free loopback port, its data in a
// folder of the test's, stopped in t.Cleanup. It skips t without
// $ZOOKEEPER_LIBS or java, except with CI set, where it fails.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	libs := os.Getenv("ZOOKEEPER_LIBS")
	var err error
	if libs == "" {
		err = errors.New("$ZOOKEEPER_LIBS is not set (test.sh fetches the jars)")
	} else if _, serr := os.Stat(filepath.Join(libs)); serr != nil {
		err = serr
	}
	skipUnlessCI(t, err, "zookeeper", "Kafka engine in Keeper")
	port, err := freePort()
	if err != nil {
		t.Fatalf("zookeeper: %v", err)
	}
	data := t.TempDir()
	p := StartProcess(t, "zookeeper", "java", "-Xmx256m", "-Dzookeeper.admin.enableServer=false",
		"-cp", filepath.Join(libs, "*"), "org.apache.zookeeper.server.ZooKeeperServerMain", strconv.Itoa(port), data)
	z := &ZooKeeper{proc: p, port: port}
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", z.Addr(), time.Second)
		if err == nil {
			_ = c.Close()
			return z
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("zookeeper did not listen on %s: %v\n%s", z.Addr(), err, p.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Addr is the server's host:port.
func (z *ZooKeeper) Addr() string { return fmt.Sprintf("127.0.0.1:%d", z.port) }
