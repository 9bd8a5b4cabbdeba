// Package kafka is offsetkeeper's Kafka client: it reads many partitions
// with one fetch loop per broker, over kafka-go's Transport (routing,
// pooled connections), and decodes record batches itself, in place.
//
// The production path, as a replica reads a partition:
//
//   - Consumer (consumer.go) owns one broker loop per broker (broker.go)
//     and the memory budget every partition shares. Consumer.Open gives a
//     Cursor.
//   - A broker loop picks the cursors to fetch and sends one request for
//     all of them (fetchrequest.go; in a fetch session, session.go), the
//     request written and its answer read by our own framing (wire.go);
//     each part of the answer goes to its cursor (answer.go).
//   - The record batches of a part are framed, checked, decompressed
//     (inflate*.go) and decoded (decode.go, decode_batch.go,
//     decode_record.go, decode_legacy.go, decode_txn.go for aborted
//     transactions), into pooled buffers (pool.go), or left for the reader
//     to decode on its goroutine (lazy.go); decoded JSON counts against the
//     budget too (decoded.go).
//   - Cursor (cursor.go) is one partition: its position, the batches
//     fetched ahead of it (Cursor.Next), its seeks, and the Fetcher
//     (fetcher.go) that holds its leader, epoch and out-of-range resets;
//     a truncated log (KIP-320) is found in truncation.go.
//
// Around it: Client (client.go, the one constructor of a connection to
// Kafka), Config (config.go: the defaults table, StartPolicy,
// IsolationLevel), the dialer (dial.go: TCP, TLS, SASL in sasl.go, and
// re-login), the bootstrap (bootstrap.go), metadata (metadata.go: leaders
// and their epochs, topic ids), ListOffsets (offsets.go), the other
// requests through franz-go's kmsg (exchange.go), which errors are worth
// retrying (retry.go), and the health a replica reports (health.go: the
// verdict on each broker, and what a failed fetch says).
package kafka
