package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	kgoscram "github.com/twmb/franz-go/pkg/sasl/scram"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/internal/secure"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
	"github.com/offsetkeeper/offsetkeeper/sinks/builtin"
)

// testSecret is the password of the tests below; no output may show it.
const testSecret = "pw-Secret-7731"

// securityFlagNames are the flags securityFlags adds to every command that
// talks to a group.
var securityFlagNames = []string{
	"etcd-cacert", "etcd-cert", "etcd-key", "etcd-user", "etcd-password-file",
	"kafka-tls", "kafka-cacert", "kafka-cert", "kafka-key", "kafka-sasl-mechanism", "kafka-user", "kafka-password-file",
}

// dryRun runs the CLI on args as execute does, but stops where the command
// would first connect to etcd (withDryRun): a valid command line returns
// errDryRun, a bad one the command's error. It returns the command that ran
// (its flags hold the values the command saw, the environment's included)
// and what it printed.
func dryRun(t *testing.T, args ...string) (*cobra.Command, string, error) {
	t.Helper()
	root := newRootCommand(builtin.Sinks())
	root.SetArgs(args)
	var out syncBuffer
	root.SetOut(&out)
	root.SetErr(&out)
	type result struct {
		cmd *cobra.Command
		err error
	}
	done := make(chan result, 1)
	go func() {
		cmd, err := root.ExecuteContextC(withDryRun(context.Background()))
		done <- result{cmd, err}
	}()
	select {
	case r := <-done:
		return r.cmd, out.String(), r.err
	case <-time.After(20 * time.Second):
		t.Fatalf("dry run of offsetkeeper %s: still running after 20s", strings.Join(args, " "))
		return nil, "", nil
	}
}

// clusterCommands are the commands that take --etcd-endpoints.
func clusterCommands(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		// dev's --etcd-endpoints and --brokers point a test run at an
		// existing cluster over plain connections (docs/dev.md): not an
		// operator's command of a secured cluster.
		if c.Flags().Lookup("etcd-endpoints") != nil && c.Name() != "dev" {
			out = append(out, c)
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return out
}

func TestSecurityFlagsOnEveryClusterCommand(t *testing.T) {
	t.Setenv(envEtcdPassword, testSecret)
	t.Setenv(envKafkaPassword, testSecret)
	cmds := clusterCommands(newRootCommand(builtin.Sinks()))
	if len(cmds) < 6 {
		t.Fatalf("only %d commands take --etcd-endpoints", len(cmds))
	}
	for _, c := range cmds {
		for _, name := range securityFlagNames {
			if c.Flags().Lookup(name) == nil {
				t.Errorf("%s has no --%s", c.CommandPath(), name)
			}
		}
		var help bytes.Buffer
		c.SetOut(&help)
		if err := c.Help(); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(help.String(), testSecret) {
			t.Errorf("%s --help shows the password from the environment", c.CommandPath())
		}
		for _, w := range []string{envEtcdPassword, envKafkaPassword} {
			if !strings.Contains(help.String(), w) {
				t.Errorf("%s --help does not say the password comes from $%s", c.CommandPath(), w)
			}
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.HasSuffix(f.Name, "password") || strings.HasSuffix(f.Name, "pass") {
				t.Errorf("%s has a password flag --%s: passwords come from the environment or a file", c.CommandPath(), f.Name)
			}
		})
	}
}

func TestSecurityUsageErrors(t *testing.T) {
	pki := harness.NewEtcdTLS(t)
	notPEM := writeFile(t, "not.pem", "not a certificate\n")
	empty := writeFile(t, "empty", "\n")
	pwFile := writeFile(t, "password", testSecret+"\n")
	missing := filepath.Join(t.TempDir(), "missing")
	run := func(extra ...string) []string { return validRun(extra...) }
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"etcd user without password", nil, run("--etcd-user", "bob"),
			[]string{"--etcd-user", `"bob"`, "$" + envEtcdPassword, "--etcd-password-file"}},
		{"etcd password file unreadable", nil, run("--etcd-user", "bob", "--etcd-password-file", missing),
			[]string{"--etcd-password-file", missing}},
		{"etcd password file empty", nil, run("--etcd-user", "bob", "--etcd-password-file", empty),
			[]string{"--etcd-password-file", "is empty"}},
		{"etcd password file without user", nil, run("--etcd-password-file", pwFile),
			[]string{"--etcd-password-file", "--etcd-user"}},
		{"etcd password in the environment without user", map[string]string{envEtcdPassword: testSecret}, run(),
			[]string{"$" + envEtcdPassword, "--etcd-user"}},
		{"etcd password twice", map[string]string{envEtcdPassword: testSecret}, run("--etcd-user", "bob", "--etcd-password-file", pwFile),
			[]string{"$" + envEtcdPassword, "--etcd-password-file", "twice"}},
		{"etcd cert without key", nil, run("--etcd-cert", pki.RootCertFile),
			[]string{"--etcd-cert", "--etcd-key", "private key"}},
		{"etcd key without cert", nil, run("--etcd-key", pki.RootKeyFile),
			[]string{"--etcd-key", "--etcd-cert"}},
		{"etcd cert and key of different pairs", nil, run("--etcd-cert", pki.RootCertFile, "--etcd-key", pki.ServerKeyFile),
			[]string{"--etcd-cert", "--etcd-key", "does not match"}},
		{"etcd cacert not PEM", nil, run("--etcd-cacert", notPEM),
			[]string{"--etcd-cacert", notPEM, "no PEM certificate"}},
		{"etcd cacert unreadable", nil, run("--etcd-cacert", missing),
			[]string{"--etcd-cacert", missing}},
		{"etcd http endpoint with TLS", nil, run("--etcd-cacert", pki.CAFile, "--etcd-endpoints", "http://127.0.0.1:1"),
			[]string{"--etcd-endpoints", `"http://127.0.0.1:1"`, "https://"}},
		{"kafka user without mechanism", map[string]string{envKafkaPassword: testSecret}, run("--kafka-user", "alice"),
			[]string{"--kafka-user", `"alice"`, "--kafka-sasl-mechanism", "scram-sha-512"}},
		{"kafka mechanism without user", nil, run("--kafka-sasl-mechanism", "plain"),
			[]string{"--kafka-sasl-mechanism", "--kafka-user"}},
		{"kafka unknown mechanism", map[string]string{envKafkaPassword: testSecret}, run("--kafka-user", "alice", "--kafka-sasl-mechanism", "GSSAPI"),
			[]string{"--kafka-sasl-mechanism", `"gssapi"`, "plain, scram-sha-256 or scram-sha-512"}},
		{"kafka unknown mechanism and no password: the mechanism named", nil, run("--kafka-user", "alice", "--kafka-sasl-mechanism", "scram-sha256"),
			[]string{"--kafka-sasl-mechanism", `"scram-sha256"`, "plain, scram-sha-256 or scram-sha-512"}},
		{"kafka user without password", nil, run("--kafka-user", "alice", "--kafka-sasl-mechanism", "scram-sha-256"),
			[]string{"--kafka-user", `"alice"`, "$" + envKafkaPassword, "--kafka-password-file"}},
		{"kafka password file unreadable", nil, run("--kafka-user", "alice", "--kafka-sasl-mechanism", "plain", "--kafka-password-file", missing),
			[]string{"--kafka-password-file", missing}},
		{"kafka password in the environment without user", map[string]string{envKafkaPassword: testSecret}, run(),
			[]string{"$" + envKafkaPassword, "--kafka-user"}},
		{"kafka cert without key", nil, run("--kafka-cert", pki.RootCertFile),
			[]string{"--kafka-cert", "--kafka-key"}},
		{"kafka cacert not PEM", nil, run("--kafka-tls", "--kafka-cacert", notPEM),
			[]string{"--kafka-cacert", "no PEM certificate"}},
		{"groups list: etcd user without password", nil, []string{"groups", "list", "--etcd-endpoints", "127.0.0.1:1", "--etcd-user", "bob"},
			[]string{"--etcd-user", `"bob"`}},
		{"offsets describe: kafka user without mechanism", map[string]string{envKafkaPassword: testSecret},
			[]string{"offsets", "describe", "--etcd-endpoints", "127.0.0.1:1", "--group", "g", "--kafka-user", "alice"},
			[]string{"--kafka-sasl-mechanism"}},
		{"claims release: etcd cert without key", nil,
			[]string{"claims", "release", "--etcd-endpoints", "127.0.0.1:1", "--group", "g", "--topic", "t", "--partition", "0", "--etcd-cert", pki.RootCertFile},
			[]string{"--etcd-key"}},
		{"from the environment: kafka mechanism", map[string]string{"OFFSETKEEPER_KAFKA_SASL_MECHANISM": "kerberos", "OFFSETKEEPER_KAFKA_USER": "alice", envKafkaPassword: testSecret},
			run(), []string{"--kafka-sasl-mechanism", `"kerberos"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The exit status, through execute (validation fails before
			// anything is dialled)...
			r := usageRun(t, tc.env, tc.args, tc.want...)
			if strings.Contains(r.stdout+r.stderr, testSecret) {
				t.Errorf("the output shows the password: %s", r.stderr)
			}
			// ...and the same error in a dry run.
			_, _, err := dryRun(t, tc.args...)
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Errorf("dry run: %v, want a usage error", err)
			}
		})
	}
}

func TestSecurityFlagsBuildClients(t *testing.T) {
	pki := harness.NewEtcdTLS(t)
	pwFile := writeFile(t, "password", testSecret+"\r\n")

	t.Run("nothing set", func(t *testing.T) {
		s := &securityFlags{}
		if err := s.validate([]string{"127.0.0.1:2379"}); err != nil {
			t.Fatal(err)
		}
		var cfg clientv3.Config
		if err := s.applyEtcd(&cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.TLS != nil || cfg.Username != "" || cfg.Password != "" {
			t.Errorf("etcd config %+v, want no TLS and no credentials", cfg)
		}
		if a := s.kafkaAuth(); a.tls != nil || a.sasl != nil {
			t.Errorf("kafka %+v, want neither TLS nor SASL", a)
		}
	})
	t.Run("etcd TLS, client certificate and user", func(t *testing.T) {
		t.Setenv(envEtcdPassword, testSecret)
		s := &securityFlags{etcdCACert: pki.CAFile, etcdCert: pki.RootCertFile, etcdKey: pki.RootKeyFile, etcdUser: "bob"}
		cfg := clientv3.Config{Endpoints: []string{"https://127.0.0.1:2379"}}
		if err := s.applyEtcd(&cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.TLS == nil || cfg.TLS.RootCAs == nil || len(cfg.TLS.Certificates) != 1 {
			t.Errorf("etcd TLS %+v, want the CA and one client certificate", cfg.TLS)
		}
		if cfg.Username != "bob" || cfg.Password != testSecret {
			t.Errorf("etcd credentials %q, %q", cfg.Username, cfg.Password)
		}
	})
	t.Run("kafka TLS with the system's CAs", func(t *testing.T) {
		s := &securityFlags{kafkaTLSOn: true}
		if err := s.validate(nil); err != nil {
			t.Fatal(err)
		}
		if a := s.kafkaAuth(); a.tls == nil || a.tls.RootCAs != nil || a.sasl != nil {
			t.Errorf("kafka %+v, want TLS with the system's CAs and no SASL", a)
		}
	})
	t.Run("kafka CA implies TLS", func(t *testing.T) {
		s := &securityFlags{kafkaCACert: pki.CAFile, kafkaCert: pki.RootCertFile, kafkaKey: pki.RootKeyFile}
		if err := s.validate(nil); err != nil {
			t.Fatal(err)
		}
		if a := s.kafkaAuth(); a.tls == nil || a.tls.RootCAs == nil || len(a.tls.Certificates) != 1 {
			t.Errorf("kafka TLS %+v, want the CA and a client certificate", a.tls)
		}
	})
	for _, tc := range []struct{ flag, name string }{
		{"plain", "PLAIN"}, {"scram-sha-256", "SCRAM-SHA-256"}, {"SCRAM-SHA-512", "SCRAM-SHA-512"},
	} {
		t.Run("kafka SASL "+tc.flag, func(t *testing.T) {
			s := &securityFlags{kafkaMechanism: tc.flag, kafkaUser: "alice", kafkaPasswordFile: pwFile}
			if err := s.validate(nil); err != nil {
				t.Fatal(err)
			}
			a := s.kafkaAuth()
			if a.sasl == nil || a.sasl.Name() != tc.name {
				t.Fatalf("mechanism %v, want %s", a.sasl, tc.name)
			}
			var k kafkaconf.Config
			a.apply(&k)
			if k.SASL == nil || k.SASL.Mechanism != a.sasl.mech || k.SASL.Username != "alice" || k.TLS != nil {
				t.Errorf("fetch config %v", k)
			}
			var fc kafkaconf.Config
			a.apply(&fc)
			mech, err := kafka.Mechanism(*fc.SASL)
			if err != nil || mech.Name() != tc.name {
				t.Fatalf("kafka-go mechanism %v, %v; want %s", mech, err, tc.name)
			}
			_, first, err := mech.Start(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "PLAIN" && string(first) != "\x00alice\x00"+testSecret {
				t.Errorf("PLAIN sends %q: the file's trailing newline is not trimmed", first)
			}
		})
	}
}

// Passwords print as xxxxx however they are printed: fmt verbs, JSON and
// zap, alone or inside the configurations that hold them.
func TestSecretsNeverPrinted(t *testing.T) {
	t.Setenv(envEtcdPassword, testSecret)
	t.Setenv(envKafkaPassword, testSecret)
	var f clusterFlags
	f.etcdEndpoints, f.brokers, f.group = []string{"127.0.0.1:1"}, []string{"127.0.0.1:1"}, "g"
	f.security.etcdUser, f.security.kafkaUser = "bob", "alice"
	for _, mech := range []string{"plain", "scram-sha-512"} {
		f.security.kafkaMechanism, f.security.built = mech, nil
		if err := f.validate(); err != nil {
			t.Fatal(err)
		}
		var k kafkaconf.Config
		f.security.kafkaAuth().apply(&k)
		var fc kafkaconf.Config
		f.security.kafkaAuth().apply(&fc)
		cfg := replica.Config{Group: "g", Kafka: k}
		mech, err := kafka.Mechanism(*fc.SASL)
		if err != nil {
			t.Fatal(err)
		}
		values := []any{secure.NewSecret(testSecret), f.security.built.etcdPassword, k.SASL, *k.SASL, k, fc.SASL, *fc.SASL, fc, mech, cfg, &cfg,
			f, &f, f.security, f.security.built}

		var printed []string
		for _, v := range values {
			for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
				printed = append(printed, fmt.Sprintf(verb, v))
			}
			if b, err := json.Marshal(v); err == nil {
				printed = append(printed, string(b))
			}
		}
		var logs bytes.Buffer
		log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&logs), zap.DebugLevel))
		log.Info("config", zap.Any("password", secure.NewSecret(testSecret)), zap.Any("sasl", fc.SASL), zap.Any("fetch", fc),
			zap.Any("replica_sasl", k.SASL), zap.Any("kafka", k), zap.Any("config", cfg),
			zap.Stringer("mechanism", fc.SASL), zap.Any("kafka_go", mech), zap.Reflect("security", f.security.built))
		printed = append(printed, logs.String())
		for _, p := range printed {
			if strings.Contains(p, testSecret) || strings.Contains(p, fmt.Sprintf("%x", testSecret)) {
				t.Errorf("%s: printed with the password: %s", mech, p)
			}
		}
		if s := fmt.Sprint(fc.SASL, k.SASL, mech); strings.Count(s, `as "alice"`) != 3 {
			t.Errorf("the mechanism prints as %q, want its name and user", s)
		}
	}
}

// etcdAuthEnv is a TLS etcd with client certificates required and auth on,
// where user "writer" has one role: readwrite on group g1's prefix.
type etcdAuthEnv struct {
	pki   *harness.EtcdTLS
	etcd  *harness.Etcd
	root  *clientv3.Client
	cert  string // a client certificate whose name is no etcd user
	key   string
	kafka *harness.Kafka
}

func newEtcdAuthEnv(t *testing.T) *etcdAuthEnv {
	t.Helper()
	e := &etcdAuthEnv{pki: harness.NewEtcdTLS(t)}
	e.etcd = harness.StartEtcdTLS(t, 1, e.pki)
	e.root = e.etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := coordinator.KeysFor("g1").Prefix()
	if _, err := e.root.RoleAdd(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.root.RoleGrantPermission(ctx, "g1", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.root.UserAdd(ctx, "writer", testSecret); err != nil {
		t.Fatal(err)
	}
	if _, err := e.root.UserGrantRole(ctx, "writer", "g1"); err != nil {
		t.Fatal(err)
	}
	e.etcd.EnableAuth(t)
	e.cert, e.key = e.pki.ClientCert(t, "offsetkeeper")
	e.kafka = harness.StartKafka(t, harness.SeedTopics(2, "orders"))
	return e
}

// flags are the cluster and security flags of group for user "writer".
func (e *etcdAuthEnv) flags(group string) []string {
	return []string{
		"--etcd-endpoints", strings.Join(e.etcd.Endpoints(), ","),
		"--etcd-cacert", e.pki.CAFile, "--etcd-cert", e.cert, "--etcd-key", e.key, "--etcd-user", "writer",
		"--brokers", strings.Join(e.kafka.Brokers(), ","),
		"--group", group,
	}
}

// The etcd client of the CLI (clusterFlags.etcdClient, from parsed flags)
// runs a replica of g1 under the restricted user; `run` for g2 and a wrong
// password are refused at once, with errors that say why.
func TestEtcdTLSAuthThroughTheCLI(t *testing.T) {
	e := newEtcdAuthEnv(t)
	t.Setenv(envEtcdPassword, testSecret)
	for p := 0; p < 2; p++ {
		recs := make([]*kgo.Record, 50)
		for i := range recs {
			recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "%d-%d", p, i)}
		}
		e.kafka.Produce(t, "orders", p, recs...)
	}

	// A replica in this process, with the client the CLI builds.
	cmd := &cobra.Command{Use: "test"}
	var f clusterFlags
	f.register(cmd)
	if err := cmd.ParseFlags(e.flags("g1")); err != nil {
		t.Fatal(err)
	}
	if err := f.validate(); err != nil {
		t.Fatal(err)
	}
	cli, err := f.etcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fetch := kafkaconf.Config{Brokers: f.brokers, FetchMaxWait: 100 * time.Millisecond}
	f.security.kafkaAuth().apply(&fetch)
	if err := f.checkAccess(ctx, cli, []string{"orders"}); err != nil {
		t.Fatalf("access check of g1: %v", err)
	}
	sink := newRecordingSink()
	r, err := replica.New(replica.Config{
		Group: "g1", ReplicaID: "r1", Topics: []string{"orders"}, Kafka: fetch,
		LeaseTTL: 2 * time.Second, FlushInterval: 100 * time.Millisecond, RebalanceDelay: 20 * time.Millisecond,
	}, cli, sink, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	defer func() { stop(); <-done }()
	coord, err := coordinator.New(e.root, "g1")
	if err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 30*time.Second, "g1 to commit 50 records per partition", func() bool {
		snap, err := coord.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Offsets[sinks.Partition{Topic: "orders", Partition: 0}].Next == 50 &&
			snap.Offsets[sinks.Partition{Topic: "orders", Partition: 1}].Next == 50
	})

	// The operator commands work with the same credentials.
	if r := opsRun(t, 30*time.Second, append([]string{"offsets", "describe", "-o", "json"}, e.flags("g1")...)...); r.code != 0 {
		t.Errorf("offsets describe of g1: %s", r)
	}

	// run for another group: refused before it joins.
	res := opsRun(t, 30*time.Second, append([]string{"run", "--topics", "orders", "--sink", "discard:", "--http-addr", ""}, e.flags("g2")...)...)
	if res.code != exitError {
		t.Fatalf("run of g2: %s", res)
	}
	for _, w := range []string{"permission denied", `user "writer"`, `group "g2"`, "/offsetkeeper/v1/groups/g2/", "readwrite"} {
		if !strings.Contains(res.stderr, w) {
			t.Errorf("run of g2: the error does not say %q: %s", w, res.stderr)
		}
	}

	// TLS that fails: gRPC would only say "context deadline exceeded". The
	// two run side by side, as each waits out the dial timeout.
	stranger := harness.NewEtcdTLS(t)
	strangerCert, strangerKey := stranger.ClientCert(t, "writer")
	runArgs := append([]string{"run", "--topics", "orders", "--sink", "discard:", "--http-addr", ""}, e.flags("g1")...)
	tlsCases := []struct {
		name  string
		extra []string
		want  []string
	}{
		{"a CA that did not sign etcd's certificate", []string{"--etcd-cacert", stranger.CAFile},
			[]string{"TLS with etcd", "certificate signed by unknown authority", "--etcd-cacert"}},
		{"a client certificate etcd does not trust", []string{"--etcd-cert", strangerCert, "--etcd-key", strangerKey},
			[]string{"TLS with etcd", "remote error: tls", "--etcd-cert"}},
	}
	results := make([]chan opsResult, len(tlsCases))
	for i, tc := range tlsCases {
		results[i] = make(chan opsResult, 1)
		go func() {
			var stdout, stderr lockedBuffer
			code := execute(append(runArgs[:len(runArgs):len(runArgs)], tc.extra...), &stdout, &stderr)
			results[i] <- opsResult{code, stdout.String(), stderr.String()}
		}()
	}
	for i, tc := range tlsCases {
		var res opsResult
		select {
		case res = <-results[i]:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: run still running after 30s", tc.name)
		}
		if res.code != exitError {
			t.Errorf("%s: %s", tc.name, res)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(res.stderr, w) {
				t.Errorf("%s: the error does not say %q: %s", tc.name, w, res.stderr)
			}
		}
	}

	// A wrong password.
	t.Setenv(envEtcdPassword, "wrong-"+testSecret)
	res = opsRun(t, 30*time.Second, append([]string{"run", "--topics", "orders", "--sink", "discard:", "--http-addr", ""}, e.flags("g1")...)...)
	if res.code != exitError || !strings.Contains(res.stderr, "authentication failed") {
		t.Errorf("run with a wrong password: %s", res)
	}
	if strings.Contains(res.stderr, testSecret) {
		t.Errorf("the error shows the password: %s", res.stderr)
	}
}

// The operator commands reach a SASL Kafka with the --kafka-* flags.
func TestOperatorCommandsUseKafkaSASL(t *testing.T) {
	etcd := harness.StartEtcd(t, 1)
	k := harness.StartKafka(t, harness.SeedTopics(1, "orders"),
		harness.KfakeOptions(kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "alice", testSecret)))
	producer, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...),
		kgo.SASL(kgoscram.Auth{User: "alice", Pass: testSecret}.AsSha256Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := producer.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("1")}, &kgo.Record{Topic: "orders", Value: []byte("2")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cli := etcd.Client(t)
	coord, err := coordinator.New(cli, "g")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := json.Marshal(coordinator.Offsets{Next: 1, Epoch: 1, Replica: "seed", At: time.Now().UTC()})
	if _, err := cli.Put(ctx, coord.Keys().Offsets(sinks.Partition{Topic: "orders", Partition: 0}), string(v)); err != nil {
		t.Fatal(err)
	}
	pwFile := writeFile(t, "kafka-password", testSecret+"\n")
	args := []string{"offsets", "describe", "-o", "json", "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
		"--brokers", strings.Join(k.Brokers(), ","), "--group", "g", "--kafka-timeout", "5s"}

	r := opsRun(t, 30*time.Second, append(args, "--kafka-sasl-mechanism", "scram-sha-256", "--kafka-user", "alice", "--kafka-password-file", pwFile)...)
	if r.code != 0 {
		t.Fatalf("offsets describe with SASL: %s", r)
	}
	var view struct {
		KafkaReachable bool `json:"kafka_reachable"`
		Partitions     []struct {
			LogEnd *int64 `json:"log_end"`
			Lag    *int64 `json:"lag"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &view); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if !view.KafkaReachable || len(view.Partitions) != 1 || view.Partitions[0].LogEnd == nil || *view.Partitions[0].LogEnd != 2 ||
		view.Partitions[0].Lag == nil || *view.Partitions[0].Lag != 1 {
		t.Errorf("offsets describe with SASL did not read the log end from Kafka:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout+r.stderr, testSecret) {
		t.Errorf("the output shows the password")
	}

	// Without the SASL flags Kafka cannot be asked: etcd's view only.
	r = opsRun(t, 30*time.Second, args...)
	if err := json.Unmarshal([]byte(r.stdout), &view); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	if view.KafkaReachable {
		t.Errorf("offsets describe without SASL reached a SASL Kafka:\n%s", r)
	}
}
