package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	_ "modernc.org/sqlite"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/internal/archetype"
	"ticketrelay/internal/backoff"
	"ticketrelay/metrics"
	"ticketrelay/store/ledger"
	"ticketrelay/store/outbox"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/fixture"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// broker is a real embedded nats-server with the ticket stream.
type broker struct {
	storeDir string
	listen   string // host:port actually bound
	mu       sync.Mutex
	srv      *server.Server
}

func startBroker(t *testing.T) *broker {
	t.Helper()
	b := &broker{storeDir: filepath.Join(t.TempDir(), "nats"), listen: "127.0.0.1:0"}
	b.start(t)
	t.Cleanup(b.stop)
	return b
}

// start (re)starts the server on the same store and, after the first start,
// the same port, as a restarted dispatcher would.
func (b *broker) start(t *testing.T) {
	t.Helper()
	s, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: b.listen, StoreDir: b.storeDir}, discard())
	if err != nil {
		t.Fatalf("StartEmbedded(%s): %v", b.listen, err)
	}
	b.mu.Lock()
	b.srv = s
	b.listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Addr().(*net.TCPAddr).Port))
	b.mu.Unlock()
}

func (b *broker) stop() {
	b.mu.Lock()
	s := b.srv
	b.mu.Unlock()
	s.Shutdown()
	s.WaitForShutdown()
}

func (b *broker) url() string { return "nats://" + b.listen }

// connect opens a client that keeps reconnecting, as the dispatcher's does.
func (b *broker) connect(t *testing.T, opts ...jetstream.JetStreamOpt) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(b.url(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, append([]jetstream.JetStreamOpt{jetstream.WithPublishAsyncMaxPending(4096)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.EnsureStream(testCtx(t), js, natsjs.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	return js
}

// streamMessages reads every stored message back, grouped by Nats-Msg-Id.
func streamMessages(t *testing.T, js jetstream.JetStream) map[string][]*jetstream.RawStreamMsg {
	t.Helper()
	ctx := testCtx(t)
	st, err := js.Stream(ctx, "TICKETS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string][]*jetstream.RawStreamMsg{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get message %d: %v", seq, err)
		}
		id := m.Header.Get(jetstream.MsgIDHeader)
		byID[id] = append(byID[id], m)
	}
	if total := countMsgs(byID); uint64(total) != info.State.Msgs {
		t.Fatalf("read %d messages, stream reports %d", total, info.State.Msgs)
	}
	return byID
}

func countMsgs(byID map[string][]*jetstream.RawStreamMsg) int {
	n := 0
	for _, ms := range byID {
		n += len(ms)
	}
	return n
}

// node is one dispatcher's view of the database: its own handle, writer,
// ledger, metrics and relay.
type node struct {
	name  string
	path  string
	db    *sqlitedb.DB
	w     *sqlitedb.Writer
	l     *ledger.Ledger
	m     *metrics.Dispatcher
	relay *outbox.Relay

	cancel context.CancelFunc
	done   chan error
}

func newNode(t *testing.T, name, path string, js jetstream.JetStream, cfg outbox.RelayConfig, now func() time.Time) *node {
	t.Helper()
	return newNodeWith(t, name, path, natsjs.NewPublisher(js), cfg, now)
}

func newNodeWith(t *testing.T, name, path string, pub outbox.Publisher, cfg outbox.RelayConfig, now func() time.Time) *node {
	t.Helper()
	return newNodeTx(t, name, path, pub, cfg, now, nil)
}

// newNodeTx is newNodeWith whose relay writes through wrap(writer) (nil:
// the writer itself).
func newNodeTx(t *testing.T, name, path string, pub outbox.Publisher, cfg outbox.RelayConfig, now func() time.Time,
	wrap func(outbox.TxRunner) outbox.TxRunner) *node {
	t.Helper()
	m := metrics.NewDispatcher(prometheus.NewRegistry())
	log := slog.New(slog.NewTextHandler(t.Output(), nil)).With("node", name)
	l := fixture.NewLedger(t, fixture.At(path), fixture.Logger(log), fixture.WriterMetrics(m.Writer))
	db, w := l.DB, l.Writer
	cfg.Holder = name
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	if cfg.ErrorBackoff == (backoff.Policy{}) {
		cfg.ErrorBackoff = backoff.Policy{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	}
	var tx outbox.TxRunner = w
	if wrap != nil {
		tx = wrap(w)
	}
	relay, err := outbox.NewRelay(archetype.Archetype{Logger: log, Metrics: m, Now: now}, cfg, db.Reader(), tx, pub)
	if err != nil {
		t.Fatal(err)
	}
	return &node{name: name, path: path, db: db, w: w, l: l.Ledger, m: m, relay: relay}
}

// run starts the relay; stop (also run at cleanup) cancels it and checks
// that Run returned nil.
func (n *node) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- n.relay.Run(ctx) }()
	t.Cleanup(func() { n.stop(t) })
}

func (n *node) stop(t *testing.T) {
	t.Helper()
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.cancel = nil
	select {
	case err := <-n.done:
		if err != nil {
			t.Errorf("relay %s: Run = %v, want nil on cancellation", n.name, err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("relay %s did not stop", n.name)
	}
}

func (n *node) create(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := n.l.Create(testCtx(t), newRequest(id, "local")); err != nil {
			t.Fatalf("Create %s: %v", id, err)
		}
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func newRequest(id, target string) ticket.Request {
	r := ticket.Request{RequestID: id, Tool: "create_ticket_" + target, Target: target,
		Title: "Ticket " + id, Body: "body of " + id, Labels: []string{"relay"}}
	if err := r.Normalize(); err != nil {
		panic(err)
	}
	return r
}

func backlog(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	n, _, err := outbox.Backlog(testCtx(t), db)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	total := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		switch {
		case d.Counter != nil:
			total += d.Counter.GetValue()
		case d.Gauge != nil:
			total += d.Gauge.GetValue()
		case d.Histogram != nil:
			total += float64(d.Histogram.GetSampleCount())
		}
	}
	return total
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// waitFor waits for cond with a deadline (see testkit/testwait).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, timeout, what, cond)
}

// publishedAt is outbox.PublishedAt for the row of requestID.
func publishedAt(t *testing.T, db *sql.DB, requestID string) (time.Time, bool, error) {
	t.Helper()
	var id int64
	err := db.QueryRowContext(testCtx(t), `SELECT id FROM outbox WHERE request_id = ?`, requestID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	return outbox.PublishedAt(testCtx(t), db, id)
}

// marked reports whether requestID's row is marked published.
func marked(t *testing.T, db *sql.DB, requestID string) bool {
	t.Helper()
	at, _, err := publishedAt(t, db, requestID)
	return err == nil && !at.IsZero()
}
