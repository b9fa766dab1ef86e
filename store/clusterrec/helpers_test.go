package clusterrec_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/delivery/forwarder"
	"ticketrelay/delivery/natsjs"
	"ticketrelay/internal/archetype"
	"ticketrelay/metrics"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/ledger"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/e2eproc"
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
	ns, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: filepath.Join(t.TempDir(), "nats")}, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return connectJS(t, ns.ClientURL())
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
	path := filepath.Join(t.TempDir(), "tickets.db")
	db, err := ledger.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	w := sqlitedb.NewWriter(db, discard(), metrics.NewFront(prometheus.NewRegistry()).Writer)
	t.Cleanup(func() { w.Close(); db.Close() })
	l := ledger.New(db, w, time.Now)
	return &host{id: id, path: path, store: s, l: l, front: clusterrec.NewFront(archetype.Archetype{Logger: discard()}, s, l), deliv: clusterrec.NewDeliveries(s, l, time.Now)}
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
