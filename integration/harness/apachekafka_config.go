package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// kafkaJVMFlags are the brokers' JVM flags. A broker runs in a small heap
// once log.cleaner.dedupe.buffer.size is small (see brokerProperties).
// The serial collector and C1 alone (no C2 compiler threads) start a node
// in some 1.5 s of CPU rather than 3, which matters more on 2 cores than
// the broker's peak throughput; with the class data sharing archive of
// sharedArchive, in under 1 s.
var kafkaJVMFlags = []string{
	"-Xms256m", "-Xmx512m",
	"-XX:+UseSerialGC",
	"-XX:TieredStopAtLevel=1",
	"-XX:+ExitOnOutOfMemoryError",
	"-Djava.awt.headless=true",
}

// brokerProperties are a node's server properties, in order; later ones
// win.
func (n *KafkaNode) brokerProperties() [][2]string {
	a := n.c
	rf := strconv.Itoa(min(3, len(a.nodes)))
	isr := strconv.Itoa(min(2, len(a.nodes)))
	var voters []string
	for _, m := range a.nodes {
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", m.id, m.controllerPort))
	}
	listeners := fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", n.port, n.controllerPort)
	advertised := fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", n.port)
	protocols := "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
	if a.tls != nil {
		listeners += fmt.Sprintf(",SASL_SSL://127.0.0.1:%d", n.saslPort)
		advertised += fmt.Sprintf(",SASL_SSL://127.0.0.1:%d", n.saslPort)
		protocols += ",SASL_SSL:SASL_SSL"
	}
	p := [][2]string{
		{"process.roles", "broker,controller"},
		{"node.id", strconv.Itoa(int(n.id))},
		{"controller.quorum.voters", strings.Join(voters, ",")},
		{"listeners", listeners},
		{"advertised.listeners", advertised},
		{"controller.listener.names", "CONTROLLER"},
		{"inter.broker.listener.name", "PLAINTEXT"},
		{"listener.security.protocol.map", protocols},
		{"log.dirs", n.dataDir()},

		// Replication: internal topics as every other.
		{"default.replication.factor", rf},
		{"min.insync.replicas", isr},
		{"offsets.topic.replication.factor", rf},
		{"offsets.topic.num.partitions", "3"},
		{"transaction.state.log.replication.factor", rf},
		{"transaction.state.log.min.isr", isr},
		{"transaction.state.log.num.partitions", "3"},
		{"share.coordinator.state.topic.replication.factor", rf},
		{"share.coordinator.state.topic.min.isr", isr},
		{"share.coordinator.state.topic.num.partitions", "3"},

		// Tests: a group forms at once; a killed broker is fenced (and
		// its leaderships move) in 4 s rather than 9; a new quorum elects
		// its leader after 0.5 to 1 s rather than 1 to 2 (a leader that
		// dies is still noticed after controller.quorum.fetch.timeout.ms,
		// 2 s).
		{"group.initial.rebalance.delay.ms", "0"},
		{"controller.quorum.election.timeout.ms", "500"},
		{"broker.heartbeat.interval.ms", "500"},
		{"broker.session.timeout.ms", "4000"},
		// A broker forwards admin requests to the active controller one
		// at a time: when that controller is paused, the one in flight
		// holds the others until it times out (30 s by default), even
		// after the quorum has a new leader.
		{"controller.socket.timeout.ms", "5000"},

		// A small machine: the cleaner's buffer (128 MiB by default, on
		// the heap from the start) must exceed 1 MiB per thread.
		{"log.cleaner.dedupe.buffer.size", strconv.Itoa(4 << 20)},
		{"log.cleaner.threads", "1"},
		{"num.network.threads", "2"},
		{"num.io.threads", "4"},
		{"num.replica.fetchers", "1"},
		{"num.recovery.threads.per.data.dir", "1"},
		{"background.threads", "2"},
	}
	if a.tls != nil {
		p = append(p, a.tls.properties(a.cfg.scram)...)
	}
	for i := 0; i+1 < len(a.cfg.props); i += 2 {
		p = append(p, [2]string{a.cfg.props[i], a.cfg.props[i+1]})
	}
	return p
}

// configure writes the node's server.properties.
func (n *KafkaNode) configure() error {
	for _, d := range []string{n.dataDir(), n.logDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	var b strings.Builder
	b.WriteString("# written by the offsetkeeper test harness\n")
	for _, kv := range n.brokerProperties() {
		fmt.Fprintf(&b, "%s=%s\n", kv[0], propertiesEscaper.Replace(kv[1]))
	}
	return os.WriteFile(n.propertiesPath(), []byte(b.String()), 0o600)
}

// propertiesEscaper escapes a value of a .properties file.
var propertiesEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`)

// format formats the node's data folder with the cluster's id, and the
// SCRAM users of SASLSCRAMOverTLS, so that they authenticate from the
// node's first second.
func (n *KafkaNode) format(ctx context.Context) error {
	args := []string{"kafka.tools.StorageTool", "format", "-t", n.c.clusterID, "-c", n.propertiesPath()}
	args = append(args, n.c.cfg.scram.formatArgs()...)
	var out syncBuffer
	cmd := n.c.command(ctx, n.logDir(), kafkaToolJVMFlags, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("format node %d: %w\n%s", n.id, err, out.String())
	}
	return nil
}

// kafkaToolJVMFlags are the JVM flags of the short-lived Java programs:
// the storage formatter, the tools, the harness's programs.
var kafkaToolJVMFlags = []string{"-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"}

// command is a java command on the jars (and extra classpath entries, in
// cp) with the cluster's log4j2 configuration, logging into logDir; it
// dies with the test process.
func (a *apacheKafka) command(ctx context.Context, logDir string, flags []string, args ...string) *exec.Cmd {
	extra := ""
	if a.cfg.programs {
		// Compiled before the first node starts (start), so no error here.
		extra, _ = compileJava(javaEnv{java: a.java, libs: a.libs, log4j: a.log4j, sources: a.sources, cds: a.cds})
	}
	return javaCommand(ctx, a.java, a.libs, a.log4j, a.cds, logDir, extra, flags, args...)
}
