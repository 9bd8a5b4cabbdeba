package harness

import (
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chKafkaConfigFile is the file, in the config.d folder beside the
// engine's configuration file, that SetKafkaClientConfig writes: the
// engine merges every file of that folder into its configuration at start.
const chKafkaConfigFile = "offsetkeeper-kafka.xml"

// SetKafkaClientConfig gives the engine's Kafka table engine librdkafka
// properties for every Kafka table (its <kafka> configuration section),
// as pairs of a property and its value, in ClickHouse's spelling: dots
// as underscores ("session_timeout_ms", "6000"). The engine reads its
// configuration at start, so a running engine is started again (Restart)
// for the properties to apply; tables and data stay. Called with no pairs
// it removes what an earlier call set.
func (c *ClickHouse) SetKafkaClientConfig(t testing.TB, kv ...string) {
	t.Helper()
	if len(kv)%2 != 0 {
		t.Fatalf("clickhouse: kafka client config: %d values, want pairs of a property and its value", len(kv))
	}
	dir := filepath.Join(filepath.Dir(c.config), "config.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("clickhouse: kafka client config: %v", err)
	}
	path := filepath.Join(dir, chKafkaConfigFile)
	if len(kv) == 0 {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			t.Fatalf("clickhouse: kafka client config: %v", err)
		}
	} else {
		var b strings.Builder
		b.WriteString("<clickhouse>\n  <!-- written by the offsetkeeper test harness -->\n  <kafka>\n")
		for i := 0; i < len(kv); i += 2 {
			name := kv[i]
			if name == "" || strings.ContainsAny(name, "<>&\"' /.") {
				t.Fatalf("clickhouse: kafka client config: property %q: want librdkafka's name with underscores for dots", name)
			}
			fmt.Fprintf(&b, "    <%s>%s</%s>\n", name, html.EscapeString(kv[i+1]), name)
		}
		b.WriteString("  </kafka>\n</clickhouse>\n")
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatalf("clickhouse: kafka client config: %v", err)
		}
	}
	if c.PID() != 0 {
		c.Restart()
	}
}

// ServerLogLines are the lines of the engine's own log (--logger.log, at
// level information, kept across restarts) that contain any of words.
func (c *ClickHouse) ServerLogLines(words ...string) []string {
	b, _ := os.ReadFile(c.serverLogPath())
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// chKeeperConfigFile is the file, in config.d, that SetKeeper writes.
const chKeeperConfigFile = "offsetkeeper-keeper.xml"

// SetKeeper points the engine at a ZooKeeper (or Keeper) at addr
// (host:port), for what keeps its state there: the Kafka engine's offsets
// with kafka_keeper_path, Replicated tables. A running engine is started
// again for it to apply; tables and data stay.
func (c *ClickHouse) SetKeeper(t testing.TB, addr string) {
	t.Helper()
	host, port, ok := strings.Cut(addr, ":")
	if !ok {
		t.Fatalf("clickhouse: keeper %q: want host:port", addr)
	}
	dir := filepath.Join(filepath.Dir(c.config), "config.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("clickhouse: keeper: %v", err)
	}
	conf := fmt.Sprintf("<clickhouse>\n  <!-- written by the offsetkeeper test harness -->\n  <zookeeper><node><host>%s</host><port>%s</port></node>"+
		"<session_timeout_ms>6000</session_timeout_ms></zookeeper>\n</clickhouse>\n", html.EscapeString(host), html.EscapeString(port))
	if err := os.WriteFile(filepath.Join(dir, chKeeperConfigFile), []byte(conf), 0o600); err != nil {
		t.Fatalf("clickhouse: keeper: %v", err)
	}
	if c.PID() != 0 {
		c.Restart()
	}
}
