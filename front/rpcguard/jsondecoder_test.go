package rpcguard

import (
	"bytes"
	"runtime"
	"testing"

	sjson "github.com/segmentio/encoding/json"
)

// TestJSONDecoderPatched guards the replace directive in go.mod: go-sdk
// decodes each JSON-RPC message with a new segmentio Decoder, and upstream's
// allocates a 32 KiB buffer for each; the patched copy in
// third_party/segmentio-encoding sizes it to the message. If the
// replacement stops applying (a go-sdk upgrade that needs a newer
// segmentio/encoding, a dropped line), every call allocates 128 KiB of
// garbage again and this test says so.
func TestJSONDecoderPatched(t *testing.T) {
	body := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_ticket","arguments":{"request_id":"r-1","title":"disk full"}}}`)
	const n = 200
	var v map[string]any
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		v = nil
		if err := sjson.NewDecoder(bytes.NewReader(body)).Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if v["method"] != "tools/call" {
		t.Fatalf("decoded %v", v)
	}
	// Patched: a message-sized buffer and the map (~6 KiB in all); upstream:
	// ~38 KiB.
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per >= 24<<10 {
		t.Errorf("decoding a %d-byte message allocates %d bytes: the patched segmentio/encoding is not in use (see third_party/segmentio-encoding/README.md)", len(body), per)
	}
}
