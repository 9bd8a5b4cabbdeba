#!/usr/bin/env bash
# The test command: every package, with the race detector, each test bound in
# time. etcd and the Kafka-protocol broker run in-process; the PostgreSQL sink's
# tests start private PostgreSQL clusters from Debian's server binaries, which
# this script installs (package postgresql) when they are missing and it runs
# as root. Without them those tests skip, except with CI set, where they fail.
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

go test -race -count=1 -timeout 15m "$@" ./...
