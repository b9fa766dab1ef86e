package e2e

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
)

// brokerJS connects to the embedded nats-server of the dispatcher of
// dataDir at url with the credential it made there, as an operator's nats
// CLI would (nats --nkey DATA/nats.nk); closed at the end of the test.
func brokerJS(t testing.TB, dataDir, url string) jetstream.JetStream {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(filepath.Join(dataDir, natsjs.SeedFile))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opt, nats.Name("ticketrelay-e2e"))
	if err != nil {
		t.Fatalf("nats %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
