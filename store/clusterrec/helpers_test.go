package clusterrec_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/forwarder"
	"ticketrelay/internal/archetype"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/ledger"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

var _ forwarder.Deliveries = (*clusterrec.Deliveries)(nil)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// embeddedJS is a single-node JetStream: the bucket at R1 behaves as at R3
// for everything but failures of nodes.
func embeddedJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	return connectJS(t, fixture.StartNATS(t).URL)
}

func connectJS(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	return e2eproc.JetStream(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
}

// host is one host of a multi-host installation: its own ledger, and the
// shared bucket.
type host struct {
	id    string
	path  string // the ledger's SQLite file
	store *clusterrec.Store
	l     *ledger.Ledger
	fx    *fixture.Ledger // the ledger's database, for a relay
	front *clusterrec.Front
	deliv *clusterrec.Deliveries
}

func newHost(t *testing.T, js jetstream.JetStream, id string, cfg clusterrec.Config) *host {
	t.Helper()
	cfg.Installation, cfg.Host = "test", id
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	s, err := clusterrec.Open(ctxT(t), archetype.Archetype{Logger: discard()}, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := fixture.NewLedger(t)
	l := f.Ledger
	return &host{id: id, path: f.Path, store: s, l: l, fx: f, front: clusterrec.NewFront(archetype.Archetype{Logger: discard()}, s, l), deliv: clusterrec.NewDeliveries(s, l, time.Now)}
}

func newRequest(id, title string) ticket.Request {
	r := ticket.Request{RequestID: id, Tool: "create_ticket", Target: "local", Title: title, Priority: "normal", Labels: []string{"ops"}}
	if err := r.Normalize(); err != nil {
		panic(err)
	}
	return r
}

func jetstreamKV(bucket, installation string) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: bucket, Metadata: map[string]string{"ticketrelay.installation": installation}}
}
