#!/usr/bin/env bash
# The test command: every package, with the race detector, each test bound in
# time. etcd and kfake (a Kafka-protocol broker) run in-process, Apache Kafka
# as processes of its jars, which this script fetches (below); the PostgreSQL sink's
# tests start private PostgreSQL clusters from Debian's server binaries, which
# this script installs (package postgresql) when they are missing and it runs
# as root. Without them those tests skip, except with CI set, where they fail.
# The ClickHouse tests run a current engine, clickhouse-local from libchdb.so
# (npm package @chdb/lib-linux-x64-gnu, 178 MB), which this script fetches
# with npm into .cache/chdb when it is missing, and passes to the tests in
# CHDB_LIB; without it (or without gcc, which builds its launcher) they skip,
# except with CI set, where they fail.
# The Schema Registry tests (internal/registry, and the harness's) run AxonOps
# Schema Registry, built from the Go module proxy as a tool of the module in
# integration/tools/schemaregistry (`go tool -n`, into Go's build cache: the
# first build takes a minute or so); if it cannot be built they skip, except
# with CI set, where they fail.
# The alert rules' tests (deploy/prometheus) run promtool, from Debian's
# package prometheus, which this script installs when it is missing and it
# runs as root, without letting the package start its server; without
# promtool they skip, except with CI set, where they fail.
set -euo pipefail
cd "$(dirname "$0")"

have_postgres() {
	compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null
}

if ! have_postgres; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing PostgreSQL (Debian package postgresql)" >&2
		# The tests run clusters of their own: have the package create none.
		mkdir -p /etc/postgresql-common/createcluster.d
		echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/offsetkeeper.conf
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
	else
		echo "test.sh: PostgreSQL's server binaries are missing (apt-get install postgresql); its tests will skip" >&2
	fi
fi

have_promtool() {
	command -v promtool >/dev/null || [ -x /usr/bin/promtool ]
}

if ! have_promtool; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing promtool (Debian package prometheus)" >&2
		# The package would start a Prometheus server (listening on every
		# interface, :9090) and enable it at boot: the tests want only
		# promtool. A policy-rc.d that denies every start keeps invoke-rc.d
		# and deb-systemd-invoke from starting it; one already there is
		# left as it is.
		policy=
		if [ ! -e /usr/sbin/policy-rc.d ]; then
			policy=/usr/sbin/policy-rc.d
			printf '#!/bin/sh\nexit 101\n' >"$policy"
			chmod +x "$policy"
		fi
		rc=0
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) || rc=$?
		if [ -n "$policy" ]; then rm -f "$policy"; fi
		if [ "$rc" != 0 ]; then exit "$rc"; fi
		if [ -d /run/systemd/system ]; then
			systemctl disable --now prometheus.service >/dev/null 2>&1 || true
		fi
	else
		echo "test.sh: promtool is missing (apt-get install prometheus); the alert rules' tests will skip" >&2
	fi
fi

# strace puts a SIGKILL of ClickHouse between two of its system calls
# (sinks/clickhouse: TestCrashBetweenBlockIDAndPartLosesNothing): installed
# from Debian's package when missing and this script runs as root.
if ! command -v strace >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing strace (Debian package strace)" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
	else
		echo "test.sh: strace is missing (apt-get install strace); the crash-window tests will skip" >&2
	fi
fi

# The oldest etcd offsetkeeper supports, 3.4 (integration: TestOldestEtcd),
# from Debian's etcd-server, run as a process by the test; the package's
# service is not started (no init system here, and policy-rc.d).
if [ ! -x /usr/bin/etcd ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing etcd 3.4 (Debian package etcd-server)" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
		# A system that starts services would have started it: stop it,
		# the tests run their own.
		(command -v systemctl >/dev/null && systemctl disable --now etcd >/dev/null 2>&1) || true
	else
		echo "test.sh: /usr/bin/etcd is missing (apt-get install etcd-server); the oldest-etcd test will skip" >&2
	fi
fi

# The engine's package; integration/harness/clickhouse.go finds the library
# in CHDB_LIB, else at .cache/chdb/libchdb.so.
chdb_pkg=@chdb/lib-linux-x64-gnu@26.7.3-stable.1
chdb_dir=.cache/chdb
install_chdb() {
	local tmp
	tmp=$(mktemp -d "$chdb_dir/fetch.XXXXXX")
	echo "test.sh: fetching ClickHouse for its tests ($chdb_pkg)" >&2
	if (cd "$tmp" && npm pack --loglevel=error "$chdb_pkg" >/dev/null && tar -xzf ./*.tgz package/libchdb.so); then
		mv "$tmp/package/libchdb.so" "$chdb_dir/libchdb.so"
		echo "$chdb_pkg" >"$chdb_dir/VERSION"
		rm -rf "$tmp"
	else
		rm -rf "$tmp"
		chdb_missing "fetching $chdb_pkg failed"
	fi
}
# In CI the ClickHouse tests must run: fail now rather than after the others.
chdb_missing() {
	if [ -n "${CI:-}" ]; then
		echo "test.sh: $1; CI is set, so the ClickHouse tests must not be skipped" >&2
		exit 1
	fi
	echo "test.sh: $1; the ClickHouse tests will skip" >&2
}
if [ -z "${CHDB_LIB:-}" ]; then
	if [ ! -f "$chdb_dir/libchdb.so" ] || [ "$(cat "$chdb_dir/VERSION" 2>/dev/null)" != "$chdb_pkg" ]; then
		mkdir -p "$chdb_dir"
		if command -v npm >/dev/null; then
			install_chdb
		else
			chdb_missing "no npm to fetch ClickHouse ($chdb_pkg)"
		fi
	fi
	if [ -f "$chdb_dir/libchdb.so" ]; then
		export CHDB_LIB="$PWD/$chdb_dir/libchdb.so"
	fi
fi

# Apache Kafka itself, for the tests that run real brokers
# (integration/harness/apachekafka.go): the jars of the broker, its tools
# and a log4j2 backend, from Maven Central with mvn
# (integration/tools/kafka/pom.xml: 47 jars, 43 MB), into
# .cache/kafka/<version>/libs, passed to the tests in KAFKA_LIBS; they run
# with java. Without mvn or java those tests skip, except with CI set,
# where they fail. The version is the pom's, and the harness's KafkaVersion.
kafka_version=4.1.1
kafka_pom=integration/tools/kafka/pom.xml
kafka_dir=.cache/kafka/$kafka_version
kafka_stamp="kafka_2.13:$kafka_version $(sha256sum "$kafka_pom" | cut -c1-16)"
# In CI the Apache Kafka tests must run: fail now rather than after the others.
kafka_missing() {
	if [ -n "${CI:-}" ]; then
		echo "test.sh: $1; CI is set, so the Apache Kafka tests must not be skipped" >&2
		exit 1
	fi
	echo "test.sh: $1; the Apache Kafka tests will skip" >&2
}
install_kafka() {
	local tmp
	mkdir -p "$kafka_dir"
	tmp=$(mktemp -d "$kafka_dir/fetch.XXXXXX")
	echo "test.sh: fetching Apache Kafka $kafka_version for its tests (mvn, $kafka_pom)" >&2
	if mvn -B -q -Dstyle.color=never -f "$kafka_pom" dependency:copy-dependencies -DoutputDirectory="$PWD/$tmp/libs" >"$tmp/mvn.log" 2>&1; then
		rm -rf "$kafka_dir/libs"
		mv "$tmp/libs" "$kafka_dir/libs"
		echo "$kafka_stamp" >"$kafka_dir/VERSION"
		rm -rf "$tmp"
	else
		tail -n 20 "$tmp/mvn.log" >&2
		rm -rf "$tmp"
		kafka_missing "fetching Apache Kafka $kafka_version with mvn failed"
	fi
}
if [ -z "${KAFKA_LIBS:-}" ]; then
	if ! command -v java >/dev/null; then
		kafka_missing "no java to run Apache Kafka"
	elif [ ! -d "$kafka_dir/libs" ] || [ "$(cat "$kafka_dir/VERSION" 2>/dev/null)" != "$kafka_stamp" ]; then
		if command -v mvn >/dev/null; then
			install_kafka
		else
			kafka_missing "no mvn to fetch Apache Kafka $kafka_version"
		fi
	fi
	if [ -d "$kafka_dir/libs" ] && [ "$(cat "$kafka_dir/VERSION" 2>/dev/null)" = "$kafka_stamp" ]; then
		export KAFKA_LIBS="$PWD/$kafka_dir/libs"
	fi
fi

# Apache ZooKeeper, for ClickHouse's Kafka engine with its offsets in Keeper
# (integration/harness/zookeeper.go): its server's jars from Maven Central
# (integration/tools/zookeeper/pom.xml: 24 jars, 14 MB) into
# .cache/zookeeper/<version>/libs, passed in ZOOKEEPER_LIBS; as for Kafka,
# its tests skip without it, except with CI set.
zookeeper_version=3.9.5
zookeeper_pom=integration/tools/zookeeper/pom.xml
zookeeper_dir=.cache/zookeeper/$zookeeper_version
zookeeper_stamp="zookeeper:$zookeeper_version $(sha256sum "$zookeeper_pom" | cut -c1-16)"
if [ -z "${ZOOKEEPER_LIBS:-}" ] && command -v java >/dev/null; then
	if [ ! -d "$zookeeper_dir/libs" ] || [ "$(cat "$zookeeper_dir/VERSION" 2>/dev/null)" != "$zookeeper_stamp" ]; then
		if command -v mvn >/dev/null; then
			mkdir -p "$zookeeper_dir"
			tmp=$(mktemp -d "$zookeeper_dir/fetch.XXXXXX")
			echo "test.sh: fetching Apache ZooKeeper $zookeeper_version for its tests (mvn, $zookeeper_pom)" >&2
			if mvn -B -q -Dstyle.color=never -f "$zookeeper_pom" dependency:copy-dependencies -DoutputDirectory="$PWD/$tmp/libs" >"$tmp/mvn.log" 2>&1; then
				rm -rf "$zookeeper_dir/libs"
				mv "$tmp/libs" "$zookeeper_dir/libs"
				echo "$zookeeper_stamp" >"$zookeeper_dir/VERSION"
			else
				tail -n 20 "$tmp/mvn.log" >&2
				if [ -n "${CI:-}" ]; then
					echo "test.sh: fetching Apache ZooKeeper failed; CI is set, so its tests must not be skipped" >&2
					exit 1
				fi
			fi
			rm -rf "$tmp"
		fi
	fi
	if [ "$(cat "$zookeeper_dir/VERSION" 2>/dev/null)" = "$zookeeper_stamp" ]; then
		export ZOOKEEPER_LIBS="$PWD/$zookeeper_dir/libs"
	fi
fi

# Build the registry once, before the test binaries that start it run at
# the same time and would each build it.
if ! (cd integration/tools/schemaregistry && go tool -n schema-registry >/dev/null); then
	if [ -n "${CI:-}" ]; then
		echo "test.sh: building the Schema Registry failed; CI is set, so its tests must not be skipped" >&2
		exit 1
	fi
	echo "test.sh: building the Schema Registry failed; its tests will skip" >&2
fi

# The docs' examples start clusters and replicas of their own: run after the
# rest, not beside the packages whose tests hold etcd leases of seconds.
go test -race -count=1 -timeout 15m "$@" $(go list ./... | grep -v '/docs$')
go test -race -count=1 -timeout 10m "$@" ./docs
