#!/usr/bin/env bash
# The test command: every package, with the race detector, each test bound in
# time. Services the tests need (etcd, the Kafka-protocol broker) run
# in-process; nothing else has to be installed.
set -euo pipefail
cd "$(dirname "$0")"
go test -race -count=1 -timeout 15m "$@" ./...
