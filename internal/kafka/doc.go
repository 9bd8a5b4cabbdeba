// Package kafka is offsetkeeper's Kafka client: it reads partitions with
// kafka-go's Transport (leader routing, TLS, SASL, version negotiation,
// pooled connections) and decodes record batches itself, in place.
//
// The parts, by file: config.go (Config, StartPolicy, IsolationLevel),
// fetcher.go (one partition read on its own), wire.go (the Fetch response,
// read whole), decode.go (record batches), metadata.go (partitions),
// retry.go (which errors are worth retrying, and how soon).
package kafka
