package harness_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

const (
	avroMoney = `{"type": "record", "name": "Money", "namespace": "shop", "fields": [
		{"name": "cents", "type": "long"}, {"name": "currency", "type": "string"}]}`
	avroOrder = `{"type": "record", "name": "Order", "namespace": "shop", "fields": [
		{"name": "id", "type": "long"}, {"name": "price", "type": "shop.Money"}]}`

	protoMoney = `syntax = "proto3";
package shop.common;
message Money { int64 cents = 1; string currency = 2; }
`
	protoOrder = `syntax = "proto3";
package shop;
import "shop/common/money.proto";
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  shop.common.Money price = 2;
  google.protobuf.Timestamp at = 3;
  message Line { string item = 1; int32 count = 2; }
  repeated Line lines = 4;
}
message Refund { int64 order_id = 1; }
`

	jsonEvent = `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
		"properties": {"kind": {"type": "string"}}, "required": ["kind"]}`
)

// TestSchemaRegistry registers a schema of each type, references among
// them, reads them back by id, and checks the producer helpers' bytes.
func TestSchemaRegistry(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	ctx := harness.Context(t, time.Minute)
	cl := reg.Client()

	moneyID := reg.RegisterAvro(t, "money-avro", avroMoney)
	orderID := reg.RegisterAvro(t, "orders-avro", avroOrder,
		harness.SchemaRef{Name: "shop.Money", Subject: "money-avro", Version: 1})
	pMoneyID := reg.RegisterProtobuf(t, "shop-common-money", protoMoney)
	pOrderID := reg.RegisterProtobuf(t, "orders-proto", protoOrder,
		harness.SchemaRef{Name: "shop/common/money.proto", Subject: "shop-common-money", Version: 1})
	jsonID := reg.RegisterJSON(t, "events-json", jsonEvent)

	ids := map[int]bool{}
	for _, id := range []int{moneyID, orderID, pMoneyID, pOrderID, jsonID} {
		if id <= 0 || ids[id] {
			t.Fatalf("ids %d %d %d %d %d: want distinct and positive", moneyID, orderID, pMoneyID, pOrderID, jsonID)
		}
		ids[id] = true
	}
	// The same schema again is the same id.
	if again := reg.RegisterJSON(t, "events-json", jsonEvent); again != jsonID {
		t.Errorf("registering again: id %d, want %d", again, jsonID)
	}

	for _, tc := range []struct {
		name string
		id   int
		typ  sr.SchemaType
		text string
		refs []sr.SchemaReference
	}{
		{"avro", orderID, sr.TypeAvro, avroOrder, []sr.SchemaReference{{Name: "shop.Money", Subject: "money-avro", Version: 1}}},
		{"protobuf", pOrderID, sr.TypeProtobuf, protoOrder, []sr.SchemaReference{{Name: "shop/common/money.proto", Subject: "shop-common-money", Version: 1}}},
		{"json", jsonID, sr.TypeJSON, jsonEvent, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := cl.SchemaByID(ctx, tc.id)
			if err != nil {
				t.Fatalf("schema %d: %v", tc.id, err)
			}
			if s.Type != tc.typ || len(s.References) != len(tc.refs) {
				t.Fatalf("schema %d: type %s, references %v; want %s, %v", tc.id, s.Type, s.References, tc.typ, tc.refs)
			}
			for i := range tc.refs {
				if s.References[i] != tc.refs[i] {
					t.Errorf("reference %d: %+v, want %+v", i, s.References[i], tc.refs[i])
				}
			}
			if s.Schema == "" {
				t.Errorf("schema %d: no text", tc.id)
			}
		})
	}
	if _, err := cl.SchemaByID(ctx, 9999); !isNotFound(err) {
		t.Errorf("unknown id: %v, want the registry's not found", err)
	}

	t.Run("avro encode", func(t *testing.T) {
		b := harness.AvroEncode(t, orderID, avroOrder, map[string]any{
			"id": int64(7), "price": map[string]any{"cents": int64(250), "currency": "EUR"},
		}, avroMoney)
		payload := checkHeader(t, b, orderID)
		cache := &avro.SchemaCache{}
		if _, err := avro.ParseWithCache(avroMoney, "", cache); err != nil {
			t.Fatal(err)
		}
		schema, err := avro.ParseWithCache(avroOrder, "", cache)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := avro.Unmarshal(schema, payload, &got); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if got["id"] != int64(7) || got["price"].(map[string]any)["currency"] != "EUR" {
			t.Errorf("decoded %v", got)
		}
	})

	t.Run("protobuf encode", func(t *testing.T) {
		fd := harness.CompileProto(t, protoOrder, map[string]string{"shop/common/money.proto": protoMoney})
		for _, tc := range []struct {
			message string
			index   []int
			header  []byte // the index as the wire format has it
		}{
			{"shop.Order", []int{0}, []byte{0}},
			{"Refund", []int{1}, []byte{2, 2}},                // count 1, index 1 (zigzag varints)
			{"shop.Order.Line", []int{0, 0}, []byte{4, 0, 0}}, // count 2, 0, 0
		} {
			if got := harness.ProtoMessageIndex(t, fd, tc.message); !slices.Equal(got, tc.index) {
				t.Errorf("%s: index %v, want %v", tc.message, got, tc.index)
			}
			fields := `{}`
			if tc.message == "shop.Order" {
				fields = `{"id": "7", "price": {"cents": "250", "currency": "EUR"}, "at": "2026-01-02T03:04:05Z", "lines": [{"item": "tea", "count": 2}]}`
			}
			b := harness.ProtoEncode(t, pOrderID, fd, tc.message, fields)
			rest := checkHeader(t, b, pOrderID)
			if !bytes.HasPrefix(rest, tc.header) {
				t.Fatalf("%s: after the id % x, want the index % x", tc.message, rest, tc.header)
			}
			if tc.message != "shop.Order" {
				continue
			}
			msg := dynamicpb.NewMessage(fd.Messages().ByName("Order"))
			if err := proto.Unmarshal(rest[len(tc.header):], msg); err != nil {
				t.Fatalf("decode: %v", err)
			}
			js, _ := protojson.Marshal(msg)
			for _, want := range []string{`"currency":"EUR"`, `"item":"tea"`, `"at":"2026-01-02T03:04:05Z"`} {
				if !bytes.Contains(bytes.ReplaceAll(js, []byte(" "), nil), []byte(want)) {
					t.Errorf("decoded %s: no %s", js, want)
				}
			}
		}
	})

	t.Run("json encode", func(t *testing.T) {
		b := harness.JSONEncode(t, jsonID, map[string]any{"kind": "click"})
		if got := string(checkHeader(t, b, jsonID)); got != `{"kind":"click"}` {
			t.Errorf("payload %s", got)
		}
	})
}

// TestSchemaRegistryPauseStop: a paused registry does not answer until it
// is resumed; a stopped one refuses connections.
func TestSchemaRegistryPauseStop(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	id := reg.RegisterJSON(t, "events", jsonEvent)
	hc := &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func() error {
		resp, err := hc.Get(reg.URL + "/schemas/ids/1")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if id != 1 {
		t.Fatalf("first id %d, want 1", id)
	}
	reg.Pause()
	if err := get(); err == nil || !isTimeout(err) {
		t.Fatalf("paused: %v, want a timeout", err)
	}
	reg.Resume()
	if err := get(); err != nil {
		t.Fatalf("resumed: %v", err)
	}
	reg.Stop()
	if err := get(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("stopped: %v, want connection refused", err)
	}
	if reg.PID() != 0 {
		t.Errorf("PID %d after Stop, want 0", reg.PID())
	}
}

// TestSchemaRegistryTLSAuth: the registry over HTTPS, with basic auth.
func TestSchemaRegistryTLSAuth(t *testing.T) {
	reg := harness.StartSchemaRegistry(t, harness.SchemaRegistryTLS(), harness.SchemaRegistryBasicAuth("alice", "alice-secret"))
	if reg.URL[:8] != "https://" {
		t.Fatalf("URL %s, want https://", reg.URL)
	}
	id := reg.RegisterAvro(t, "s", `"string"`)
	if _, err := reg.Client().SchemaByID(harness.Context(t, 30*time.Second), id); err != nil {
		t.Fatalf("schema %d with credentials: %v", id, err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: reg.TLS(), DisableKeepAlives: true}}
	for _, tc := range []struct {
		name       string
		user, pass string
		want       int
	}{
		{"no credentials", "", "", http.StatusUnauthorized},
		{"wrong password", "alice", "nope", http.StatusUnauthorized},
		{"right", "alice", "alice-secret", http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, reg.URL+"/schemas/types", nil)
		if tc.user != "" {
			req.SetBasicAuth(tc.user, tc.pass)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d", tc.name, resp.Status, tc.want)
		}
	}
}

// checkHeader checks b's Confluent header of id and returns what follows.
func checkHeader(t *testing.T, b []byte, id int) []byte {
	t.Helper()
	if len(b) < 5 || b[0] != 0 || binary.BigEndian.Uint32(b[1:5]) != uint32(id) {
		t.Fatalf("header % x, want 00 and id %d", b[:min(len(b), 5)], id)
	}
	return b[5:]
}

func isNotFound(err error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && re.ErrorCode == 40403
}
