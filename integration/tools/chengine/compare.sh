#!/usr/bin/env bash
# compare.sh — the crash comparison of BenchmarkClickHouseEngineVsReplicaCrashes
# (integration/chengine_bench_test.go) on your own ClickHouse, Kafka and etcd:
# RATE records a second, each with a unique id, for DURATION seconds, while the
# consumer is SIGKILLed every KILL_EVERY seconds and started again; then, once the
# consumer has caught up, what the table holds against the ids produced.
#
#   compare.sh engine       ClickHouse's Kafka table (kafka_commit_every_batch = 0,
#                           the default) and a materialized view into a MergeTree;
#                           the consumer lives in ClickHouse, so CH_KILL is run
#   compare.sh engine-ceb   the same with kafka_commit_every_batch = 1
#   compare.sh replica      3 `offsetkeeper run` processes into a MergeTree of the
#                           same shape over HTTP; kill -9 of one, a new one started
#
# It needs curl, jq, Kafka's scripts (kafka-topics.sh, kafka-console-producer.sh,
# kafka-consumer-groups.sh) and, for `replica`, the offsetkeeper binary and etcd.
# Everything it makes is named chcmp_<mode>_<time> (topic, group, tables); the
# target table is left for you to look at (CLEANUP=1 drops it).
#
# Settings (environment):
#   CH_URL        ClickHouse's HTTP interface            http://127.0.0.1:8123
#   CH_DB         its database                           default
#   CH_BROKERS    the brokers as ClickHouse reaches them  $BROKERS
#   CH_KILL       a command that SIGKILLs ClickHouse and starts it again, for
#                 engine modes, e.g.
#                 'docker kill -s KILL ch && docker start ch'
#   BROKERS       the brokers as this host reaches them  127.0.0.1:9092
#   KAFKA_BIN     prefix of Kafka's scripts              /opt/kafka/bin
#                 (or e.g. 'docker compose exec -T kafka /opt/kafka/bin')
#   ETCD          etcd endpoints                          127.0.0.1:2379
#   OFFSETKEEPER  the binary                              offsetkeeper
#   RATE DURATION KILL_EVERY PARTITIONS                   5000 30 5 8
#   LEASE_TTL     the replicas' --lease-ttl               6s
#
# The engine's consumer group waits for a killed consumer's session to expire
# before it reassigns its partitions: librdkafka's default is 45 s. The
# benchmark sets 6 s, in a file of ClickHouse's config.d (applies at restart):
#   <clickhouse><kafka><session_timeout_ms>6000</session_timeout_ms>
#     <heartbeat_interval_ms>1000</heartbeat_interval_ms></kafka></clickhouse>
set -euo pipefail

mode=${1:-}
case "$mode" in
engine | engine-ceb | replica) ;;
*)
	echo "usage: $0 engine|engine-ceb|replica (settings in the environment: see the top of $0)" >&2
	exit 2
	;;
esac

CH_URL=${CH_URL:-http://127.0.0.1:8123}
CH_DB=${CH_DB:-default}
BROKERS=${BROKERS:-127.0.0.1:9092}
CH_BROKERS=${CH_BROKERS:-$BROKERS}
KAFKA_BIN=${KAFKA_BIN:-/opt/kafka/bin}
ETCD=${ETCD:-127.0.0.1:2379}
OFFSETKEEPER=${OFFSETKEEPER:-offsetkeeper}
RATE=${RATE:-5000}
DURATION=${DURATION:-30}
KILL_EVERY=${KILL_EVERY:-5}
PARTITIONS=${PARTITIONS:-8}
LEASE_TTL=${LEASE_TTL:-6s}
CH_KILL=${CH_KILL:-}
if [[ $mode == engine* && -z $CH_KILL ]]; then
	echo "$0 $mode: set CH_KILL to a command that SIGKILLs ClickHouse and starts it again" >&2
	exit 2
fi

name=chcmp_${mode//-/_}_$(date +%s)
total=$((RATE * DURATION))
logs=$(mktemp -d)
echo "run $name: $total records at $RATE/s over $PARTITIONS partitions, a kill every ${KILL_EVERY}s; logs in $logs"

# q runs one statement; it retries while ClickHouse restarts.
q() {
	local i
	for i in $(seq 60); do
		if curl -sS --fail-with-body "$CH_URL/?database=$CH_DB" --data-binary "$1" 2>>"$logs/curl.log"; then
			return 0
		fi
		sleep 1
	done
	echo "ClickHouse does not answer: $1" >&2
	return 1
}

# The target: the same for both, but for the deduplication window the sink
# needs (the engine's users have ClickHouse's default, 0).
window=0
[[ $mode == replica ]] && window=10000
fields="id UInt64, name String, amount Int64, ts Int64, note String"
q "CREATE TABLE $name ($fields, kafka_topic String, kafka_partition Int32, kafka_offset Int64)
	ENGINE = MergeTree ORDER BY (kafka_partition, kafka_offset)
	SETTINGS non_replicated_deduplication_window = $window"
$KAFKA_BIN/kafka-topics.sh --bootstrap-server "$BROKERS" --create --topic "$name" --partitions "$PARTITIONS" >/dev/null

pids=()
started=0
start_replica() {
	started=$((started + 1))
	local host=${CH_URL#http://}
	host=${host#https://}
	"$OFFSETKEEPER" run --etcd-endpoints "$ETCD" --brokers "$BROKERS" --group "$name" --topics "$name" \
		--sink "clickhouse://$host/$CH_DB?table=$name&mode=columns&protocol=http" \
		--replica-id "r$started" --lease-ttl "$LEASE_TTL" --http-addr 127.0.0.1:0 --log-level warn \
		>"$logs/r$started.log" 2>&1 &
	pids+=($!)
}

if [[ $mode == replica ]]; then
	for _ in 1 2 3; do start_replica; done
else
	ceb=0
	[[ $mode == engine-ceb ]] && ceb=1
	q "CREATE TABLE kq_$name ($fields) ENGINE = Kafka SETTINGS kafka_broker_list = '$CH_BROKERS',
		kafka_topic_list = '$name', kafka_group_name = '$name', kafka_format = 'JSONEachRow',
		kafka_num_consumers = 1, kafka_max_block_size = 65536, kafka_flush_interval_ms = 1000,
		kafka_commit_every_batch = $ceb"
	q "CREATE MATERIALIZED VIEW mv_$name TO $name AS SELECT id, name, amount, ts, note,
		_topic AS kafka_topic, toInt32(_partition) AS kafka_partition, toInt64(_offset) AS kafka_offset FROM kq_$name"
fi

# RATE records a second, ids 0..total-1, each second's in one burst.
produce() {
	local s next
	next=$(date +%s)
	for ((s = 0; s < DURATION; s++)); do
		awk -v from=$((s * RATE)) -v n="$RATE" -v ts="$(date +%s%3N)" 'BEGIN {
			for (i = from; i < from + n; i++)
				printf "{\"id\":%d,\"name\":\"customer-%07d\",\"amount\":%d,\"ts\":%s,\"note\":\"xxxxxxxxxxxxxxxxxx\"}\n", i, i, i % 1000, ts
		}'
		next=$((next + 1))
		sleep "$(awk -v t="$next" -v now="$(date +%s.%N)" 'BEGIN { d = t - now; print (d > 0 ? d : 0) }')"
	done | $KAFKA_BIN/kafka-console-producer.sh --bootstrap-server "$BROKERS" --topic "$name" \
		--producer-property acks=all --producer-property linger.ms=5 >"$logs/producer.log" 2>&1
}
produce &
producer=$!

kills=0
while kill -0 "$producer" 2>/dev/null; do
	sleep "$KILL_EVERY"
	kill -0 "$producer" 2>/dev/null || break
	kills=$((kills + 1))
	if [[ $mode == replica ]]; then
		i=$((RANDOM % ${#pids[@]}))
		kill -9 "${pids[$i]}" 2>/dev/null || true
		wait "${pids[$i]}" 2>/dev/null || true
		unset 'pids[i]'
		pids=("${pids[@]}")
		start_replica
		echo "kill $kills: a replica SIGKILLed, r$started started"
	else
		bash -c "$CH_KILL" >>"$logs/ch_kill.log" 2>&1
		echo "kill $kills: ClickHouse SIGKILLed and started again"
	fi
done
wait "$producer" || {
	echo "the producer failed: see $logs/producer.log" >&2
	exit 1
}
echo "produced $total records; waiting for the consumer to commit them all (at most 5 minutes)"

# lag is the group's lag summed over the partitions, empty while a partition
# has no committed offset.
lag() {
	if [[ $mode == replica ]]; then
		"$OFFSETKEEPER" offsets describe --etcd-endpoints "$ETCD" --brokers "$BROKERS" --group "$name" -o json 2>/dev/null |
			jq -r 'if (.partitions | length) == 0 or any(.partitions[]; .lag == null) then "" else ([.partitions[].lag] | add) end'
	else
		$KAFKA_BIN/kafka-consumer-groups.sh --bootstrap-server "$BROKERS" --describe --group "$name" 2>/dev/null |
			awk -v t="$name" -v p="$PARTITIONS" '$2 == t { n++; if ($6 == "-") bad = 1; else sum += $6 }
				END { if (n == p && !bad) print sum }'
	fi
}
for i in $(seq 300); do
	l=$(lag || true)
	[[ $l == 0 ]] && break
	sleep 1
done
[[ ${l:-} == 0 ]] || echo "the consumer did not catch up (lag '${l:-?}'): counting what is there"
sleep 3 # the last block's insert, after its commit with kafka_commit_every_batch = 1

q "SELECT count() AS rows, uniqExact(id) AS distinct_ids, rows - distinct_ids AS duplicate_rows,
	$total - uniqExactIf(id, id < $total) AS lost, $kills AS kills
	FROM $name FORMAT Vertical"

for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
if [[ $mode != replica ]]; then
	q "DROP VIEW mv_$name"
	q "DROP TABLE kq_$name"
fi
if [[ ${CLEANUP:-0} == 1 ]]; then
	q "DROP TABLE $name"
fi
