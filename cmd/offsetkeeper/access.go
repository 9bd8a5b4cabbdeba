package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/internal/kafka"
	"github.com/offsetkeeper/offsetkeeper/internal/secure"
	"github.com/offsetkeeper/offsetkeeper/kafkaconf"
)

// checkAccess is run's start-up check of the credentials: when etcd or Kafka
// refuse them, it fails at once with an error that says what to fix, instead
// of a replica that retries forever and logs the refusal at warn. Only a
// refusal fails: etcd or Kafka being unreachable is left to the replica,
// which retries as always. It checks only what is configured: etcd when a
// user or a client certificate is given, Kafka when TLS or SASL is.
//
// etcd: one transaction reads the group's prefix (count only) and deletes
// P/access-check, a key that never exists: read and write permission on the
// prefix, the least role a replica needs. Kafka: the topics' metadata.
func (f *clusterFlags) checkAccess(ctx context.Context, cli *clientv3.Client, topics []string) error {
	if f.security.etcdUser != "" || f.security.etcdCert != "" {
		if err := f.checkEtcdAccess(ctx, cli); err != nil {
			return err
		}
	}
	return f.checkKafkaAccess(ctx, f.security.kafkaAuth(), topics)
}

func (f *clusterFlags) checkEtcdAccess(ctx context.Context, cli *clientv3.Client) error {
	prefix := coordinator.KeysFor(f.group).Prefix()
	cctx, cancel := context.WithTimeout(ctx, accessCheckTimeout)
	defer cancel()
	_, err := cli.Txn(cctx).Then(
		clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpDelete(prefix+accessCheckKey),
	).Commit()
	who := "the user named by the client certificate"
	if f.security.etcdUser != "" {
		who = fmt.Sprintf("user %q", f.security.etcdUser)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("etcd refused %s access to group %q: %w: its role needs readwrite on the prefix %s "+
			"(etcdctl role grant-permission ROLE readwrite --prefix=true %s)", who, f.group, err, prefix, prefix)
	case errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("etcd has authentication enabled and %s is not an etcd user: %w: set --etcd-user (password in $%s or --etcd-password-file)",
			who, err, envEtcdPassword)
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrInvalidAuthToken),
		errors.Is(err, rpctypes.ErrAuthOldRevision), errors.Is(err, rpctypes.ErrUserNotFound):
		return fmt.Errorf("etcd refused the credentials of %s for group %q: %w", who, f.group, err)
	default:
		// gRPC reports a TLS handshake that fails as a timeout: look.
		if p := f.security.etcdTLSProblem(ctx, f.etcdEndpoints); p != nil {
			return p
		}
		return nil // unreachable or slow: the replica retries
	}
}

func (f *clusterFlags) checkKafkaAccess(ctx context.Context, auth kafkaAuth, topics []string) error {
	cfg := kafkaconf.Config{Brokers: f.brokers, ClientID: cmp.Or(f.kafkaClientID, kafkaconf.DefaultClientID), DialTimeout: accessCheckTimeout}
	auth.apply(&cfg)
	c, err := kafka.NewClient(cfg, topics...)
	if err != nil {
		return usage(err)
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, accessCheckTimeout)
	defer cancel()
	// The first broker that answers tells; see CheckAccess for why it has
	// a connection of its own.
	err = c.CheckAccess(cctx, kafkaRefused, topics...)
	if err == nil {
		return nil
	}
	if !kafkaRefused(err) {
		if cause := kafka.Cause(err); cause == kafka.CauseClosed || cause == kafka.CauseTimeout {
			// A connection closed at once: a TLS listener that got a
			// plain request, or a plain one that got a TLS hello.
			if p := f.listenerMismatch(ctx, auth.tls != nil); p != nil {
				return p
			}
		}
		return nil // unreachable, or a topic still missing: the replica retries
	}
	login := "no SASL"
	if auth.sasl != nil {
		login = auth.sasl.String()
	}
	tlsState := "TLS off"
	if auth.tls != nil {
		tlsState = "TLS on"
	}
	return fmt.Errorf("kafka at %s refused this client (%s, %s): %w: check --kafka-user, --kafka-sasl-mechanism, "+
		"the password ($%s or --kafka-password-file) and the TLS flags", strings.Join(f.brokers, ","), login, tlsState, err, envKafkaPassword)
}

// kafkaRefused tells a refusal of the credentials or certificates from
// Kafka being unreachable.
func kafkaRefused(err error) bool { return kafka.Refused(err) || secure.HandshakeFailed(err) }

// explainEtcd makes the error of connecting to etcd say what to fix where
// it can: gRPC reports a TLS handshake that fails as a timeout, and a
// refused password does not name the flags.
func (s *securityFlags) explainEtcd(err error, endpoints []string) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		if p := s.etcdTLSProblem(context.Background(), endpoints); p != nil {
			return p
		}
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return fmt.Errorf("%w: check --etcd-user %q and its password ($%s or --etcd-password-file)", err, s.etcdUser, envEtcdPassword)
	}
	return err
}

// etcdTLSProblem returns the first TLS failure with the https endpoints
// (secure.HandshakeFailure), naming the flags that mend it; nil when there
// is none, also when no endpoint answers, and at once when TLS is off.
func (s *securityFlags) etcdTLSProblem(ctx context.Context, endpoints []string) error {
	if s.built == nil || s.built.etcdTLS == nil {
		return nil
	}
	addr, err := secure.HandshakeFailure(ctx, endpoints, s.built.etcdTLS, tlsProbeTimeout)
	if err == nil {
		return nil
	}
	return fmt.Errorf("TLS with etcd at %s failed: %w: check --etcd-cacert (the CA of etcd's server certificate), "+
		"--etcd-cert and --etcd-key (a client certificate etcd's --trusted-ca-file signed)", addr, err)
}

// A dry run parses and validates a command's flags and environment and stops
// where the command would first connect to etcd, with errDryRun. The
// docker-compose test checks command lines with it, without a cluster.
type dryRunKey struct{}

var errDryRun = errors.New("dry run: the command line is valid; not connecting")

func withDryRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, dryRunKey{}, true)
}

func isDryRun(ctx context.Context) bool {
	if ctx == nil {
		return false
	}
	v, _ := ctx.Value(dryRunKey{}).(bool)
	return v
}
