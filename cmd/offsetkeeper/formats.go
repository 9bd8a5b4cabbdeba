package main

import (
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/offsetkeeper/offsetkeeper/internal/redact"
	"github.com/offsetkeeper/offsetkeeper/replica"
	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// envRegistryPassword holds the --schema-registry-user's password; like
// the others it has no flag (see envEtcdPassword).
const envRegistryPassword = "OFFSETKEEPER_SCHEMA_REGISTRY_PASSWORD"

// formatNames is what --key-format and --value-format accept.
var formatNames = func() []string {
	names := make([]string, len(replica.FormatNames))
	for i, f := range replica.FormatNames {
		names[i] = f.String()
	}
	return names
}()

// formatFlags are run's --key-format, --value-format and the Schema
// Registry they read schemas from.
type formatFlags struct {
	key, value    sinks.Format
	onDecodeError replica.DecodeErrorPolicy

	registry      string
	user          string
	passwordFile  string
	caCert        string
	cert, certKey string
	timeout       time.Duration
	cacheSize     int
}

func (f *formatFlags) register(fs *pflag.FlagSet) {
	f.key, f.value = sinks.JSON, sinks.JSON
	fs.Var(&parsedFlag[sinks.Format]{&f.key, replica.ParseFormat, formatNames}, "key-format",
		"how record keys are encoded: json (passed through as they are), bytes (opaque), or avro, protobuf, json-schema in Confluent's wire format (needs --schema-registry)")
	fs.Var(&parsedFlag[sinks.Format]{&f.value, replica.ParseFormat, formatNames}, "value-format",
		"how record values are encoded: json (passed through as they are), bytes (opaque), or avro, protobuf, json-schema in Confluent's wire format, decoded into JSON for the sink (needs --schema-registry)")
	fs.Var(enumVar(&f.onDecodeError),
		"on-decode-error", "a record that cannot be decoded: dead-letter (into the sink's dead-letter table; where it has none, stop), stop (the partition waits at it, logging why) or skip (left out, counted, logged)")
	fs.StringVar(&f.registry, "schema-registry", "", "Schema Registry URL, http:// or https:// (comma-separated: tried in order), for the avro, protobuf and json-schema formats")
	fs.StringVar(&f.user, "schema-registry-user", "", "Schema Registry basic-auth user; the password is read from $"+envRegistryPassword+" or --schema-registry-password-file")
	fs.StringVar(&f.passwordFile, "schema-registry-password-file", "", "file holding the --schema-registry-user's password (a trailing newline is ignored)")
	fs.StringVar(&f.caCert, "schema-registry-cacert", "", "CA bundle (PEM) that signed the registry's certificate (https://)")
	fs.StringVar(&f.cert, "schema-registry-cert", "", "client certificate (PEM) for a registry that requires one; needs --schema-registry-key")
	fs.StringVar(&f.certKey, "schema-registry-key", "", "private key (PEM) of --schema-registry-cert")
	fs.DurationVar(&f.timeout, "schema-registry-timeout", 10*time.Second, "bound on each registry request; a schema not fetched in time rolls its block back to be read again")
	fs.IntVar(&f.cacheSize, "schema-cache-size", 1000, "schemas kept compiled, per format (each is fetched once, on the first record naming it)")
}

// build checks the flags by name and returns the replica's Formats.
func (f *formatFlags) build() (replica.Formats, error) {
	needs := f.key.Registered() || f.value.Registered()
	switch {
	case needs && f.registry == "":
		return replica.Formats{}, usagef("--key-format %s --value-format %s read schemas from a Schema Registry: set --schema-registry http://host:8081", f.key, f.value)
	case !needs && f.registry != "":
		return replica.Formats{}, usagef("--schema-registry %q is set but neither --key-format nor --value-format is avro, protobuf or json-schema: drop it, or name the format", redact.URL(f.registry))
	case f.timeout <= 0:
		return replica.Formats{}, usagef("--schema-registry-timeout must be positive; the value given, %s, is not: want a duration such as 10s", f.timeout)
	case f.cacheSize < 1:
		return replica.Formats{}, usagef("--schema-cache-size %d: want 1 or more", f.cacheSize)
	}
	tlsCfg, err := tlsFlags("schema-registry", f.caCert, f.cert, f.certKey, false).Config()
	if err != nil {
		return replica.Formats{}, usage(err)
	}
	pass, err := loginFlags("schema-registry", f.user, f.passwordFile, envRegistryPassword).Read()
	if err != nil {
		return replica.Formats{}, usage(err)
	}
	out := replica.Formats{
		Key: f.key, Value: f.value, OnDecodeError: f.onDecodeError,
		Registry: replica.SchemaRegistry{URL: f.registry, TLS: tlsCfg, Username: f.user, Password: pass.Reveal(),
			Timeout: f.timeout, CacheSize: f.cacheSize},
	}
	for _, u := range strings.Split(f.registry, ",") {
		if f.registry == "" {
			break
		}
		parsed, err := url.Parse(strings.TrimSpace(u))
		if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
			return replica.Formats{}, usagef("--schema-registry %q: want http://host:port or https://host:port (comma-separated for several)", redact.URL(u))
		}
		if tlsCfg != nil && parsed.Scheme != "https" {
			return replica.Formats{}, usagef("--schema-registry %q is http:// but --schema-registry-cacert or --schema-registry-cert ask for TLS: use https://", redact.URL(u))
		}
		if parsed.User != nil {
			return replica.Formats{}, usagef("--schema-registry %q holds credentials: use --schema-registry-user and $%s (or --schema-registry-password-file), which stay out of process listings", redact.URL(u), envRegistryPassword)
		}
	}
	return out, nil
}
