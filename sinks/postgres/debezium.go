package postgres

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/offsetkeeper/offsetkeeper/sinks/internal/sqlsink"
)

// event is the part of a Debezium change event upsert mode reads.
type event struct {
	op            string
	before, after json.RawMessage
	tombstone     bool // the JsonConverter's {"schema": ..., "payload": null}
}

// debeziumEvent reads a Debezium change event, with or without the
// JsonConverter's schema/payload wrapper, or says why it is none.
func debeziumEvent(value []byte) (event, string) {
	if why := sqlsink.RowReason(value); why != "" {
		return event{}, "debezium event: " + why
	}
	if inner, ok := unwrapSchema(value); ok {
		if string(bytes.TrimSpace(inner)) == "null" {
			return event{tombstone: true}, ""
		}
		value = inner
	}
	var raw struct {
		Op     *string         `json:"op"`
		Before json.RawMessage `json:"before"`
		After  json.RawMessage `json:"after"`
	}
	if err := json.Unmarshal(value, &raw); err != nil {
		return event{}, fmt.Sprintf("debezium event: %v", err)
	}
	if raw.Op == nil {
		return event{}, `debezium event has no "op"`
	}
	ev := event{op: *raw.Op, before: nullRaw(raw.Before), after: nullRaw(raw.After)}
	switch ev.op {
	case "c", "r", "u":
		if ev.after == nil {
			return event{}, fmt.Sprintf("debezium op %q without after", ev.op)
		}
	case "d":
	default:
		return event{}, fmt.Sprintf("debezium op %q is not applied: want c, r, u or d", ev.op)
	}
	return ev, ""
}

// unwrapSchema returns the payload of the JsonConverter's envelope
// {"schema": ..., "payload": ...}, and whether b is one.
func unwrapSchema(b []byte) (json.RawMessage, bool) {
	var w map[string]json.RawMessage
	if json.Unmarshal(b, &w) != nil || len(w) != 2 {
		return nil, false
	}
	_, hasSchema := w["schema"]
	payload, hasPayload := w["payload"]
	return payload, hasSchema && hasPayload
}

// nullRaw is nil for an absent field or JSON null.
func nullRaw(r json.RawMessage) json.RawMessage {
	if r == nil || string(bytes.TrimSpace(r)) == "null" {
		return nil
	}
	return r
}
