package audit_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/delivery/audit"
	"ticketrelay/delivery/natsjs"
	"ticketrelay/internal/archetype"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/store/outbox"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/fixture"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// world is a ledger on a real SQLite file, a relay publishing it to a real
// embedded JetStream as atomic batches, and nothing consuming: no delivery
// is ever recorded unless the test records one.
type world struct {
	db     *sqlitedb.DB
	wr     *sqlitedb.Writer
	l      *ledger.Ledger
	read   *sql.DB
	m      *metrics.Dispatcher
	stream jetstream.Stream
	check  *natsjs.StreamChecker
	relay  *outbox.Relay
	log    *slog.Logger
	js     jetstream.JetStream
	cfg    natsjs.StreamConfig
}

func newWorld(t *testing.T) *world { return newWorldWith(t, nil) }

// newWorldWith builds a world whose relay publishes through wrap(the
// publisher), if wrap is not nil.
func newWorldWith(t *testing.T, wrap func(outbox.Publisher) outbox.Publisher) *world {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	js := fixture.StartNATS(t, jetstream.WithPublishAsyncMaxPending(4096), jetstream.WithPublishAsyncTimeout(10*time.Second)).JS
	cfg := natsjs.StreamConfig{}.WithDefaults()
	st, err := natsjs.EnsureStream(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.NewDispatcher(prometheus.NewRegistry())
	l := fixture.NewLedger(t, fixture.Logger(log), fixture.WriterMetrics(m.Writer))
	db, w := l.DB, l.Writer
	var pub outbox.Publisher = natsjs.NewPublisher(js, natsjs.AtomicBatches(nil))
	if wrap != nil {
		pub = wrap(pub)
	}
	relay, err := outbox.NewRelay(archetype.Archetype{Logger: log, Metrics: m}, outbox.RelayConfig{Holder: "audit-test", PollInterval: 5 * time.Millisecond},
		db.Reader(), w, pub)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	return &world{db: db, wr: w, l: l.Ledger, read: db.Reader(), m: m, stream: st,
		check: natsjs.NewStreamChecker(js, cfg.Name), relay: relay, log: log, js: js, cfg: cfg}
}

func (w *world) create(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		r := ticket.Request{RequestID: id, Tool: "create_ticket_local", Target: "local", Title: "Ticket " + id}
		if err := r.Normalize(); err != nil {
			t.Fatal(err)
		}
		if _, err := w.l.Create(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}

// row is an outbox row as the test reads it.
type row struct {
	published  bool
	generation int
	seq        uint64
}

func (w *world) row(t *testing.T, id string) row {
	t.Helper()
	var r row
	var published, seq sql.NullInt64
	if err := w.read.QueryRow(`SELECT published_at, generation, stream_seq FROM outbox WHERE request_id = ?`, id).
		Scan(&published, &r.generation, &seq); err != nil {
		t.Fatal(err)
	}
	r.published, r.seq = published.Valid, uint64(seq.Int64)
	return r
}

func (w *world) allPublished(t *testing.T, ids []string) {
	t.Helper()
	testwait.For(t, 10*time.Second, "every row published", func() bool {
		for _, id := range ids {
			if r := w.row(t, id); !r.published || r.seq == 0 {
				return false
			}
		}
		return true
	})
}

// lose deletes the messages of ids from the stream, as a broker that lost
// them would.
func (w *world) lose(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := w.stream.DeleteMsg(context.Background(), w.row(t, id).seq); err != nil {
			t.Fatal(err)
		}
	}
}

// wantRepublished checks that of ids exactly those in again were queued
// again (generation 1) and the others never (generation 0).
func (w *world) wantRepublished(t *testing.T, ids []string, again ...string) {
	t.Helper()
	for _, id := range ids {
		want := 0
		if slices.Contains(again, id) {
			want = 1
		}
		if g := w.row(t, id).generation; g != want {
			t.Errorf("%s: generation %d, want %d", id, g, want)
		}
	}
}

// The audit republishes exactly the published messages the stream no longer
// holds and that no delivery was recorded for; the relay stores them again
// under a new message id; a second pass finds nothing more.
func TestAuditRepublishesWhatTheStreamLost(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	var ids []string
	for i := range 12 {
		ids = append(ids, fmt.Sprintf("req-%02d", i))
	}
	w.create(t, ids...)
	w.allPublished(t, ids)

	// The stream loses three messages; one of them had reached the
	// forwarder, which recorded the delivery.
	w.lose(t, "req-02", "req-07", "req-11")
	if err := w.l.RecordDelivery(ctx, request.Delivery{RequestID: "req-07", Target: "local", State: string(request.StatusDelivered), Attempts: 1}); err != nil {
		t.Fatal(err)
	}

	clock := time.Now().Add(10 * time.Minute) // every row is older than After
	a, err := audit.New(archetype.Archetype{Logger: w.log, Metrics: w.m, Now: func() time.Time { return clock }}, audit.Config{After: 5 * time.Minute, Batch: 5}, w.l, w.check, w.relay.Leading)
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the relay to hold its lease", w.relay.Leading)
	rounds := 0
	for more := true; more; rounds++ {
		if more, err = a.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if rounds != 3 { // 5 + 5 + 2 rows
		t.Errorf("%d rounds for 12 rows in batches of 5, want 3", rounds)
	}
	if got := testutil.ToFloat64(w.m.StreamLost); got != 2 {
		t.Errorf("stream_lost_messages_total = %v, want 2 (req-02, req-11)", got)
	}
	if got := testutil.ToFloat64(w.m.AuditChecked); got != 11 {
		t.Errorf("stream_audit_checks_total = %v, want 11 (every row without a delivery record)", got)
	}
	w.wantRepublished(t, ids, "req-02", "req-11")

	// The relay publishes them again under their redrive ids.
	w.allPublished(t, ids)
	for _, id := range []string{"req-02", "req-11"} {
		r := w.row(t, id)
		msgID := outbox.Message{RequestID: id, Generation: r.generation}.MsgID()
		if ok, err := w.check.Holds(ctx, r.seq, msgID); err != nil || !ok {
			t.Errorf("%s: the stream does not hold %s at %d after the republish (%v)", id, msgID, r.seq, err)
		}
	}

	// A pass that starts from the first row again finds everything held.
	clock = clock.Add(25 * time.Hour)
	for more := true; more; {
		if more, err = a.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(w.m.StreamLost); got != 2 {
		t.Errorf("second pass: stream_lost_messages_total = %v, want still 2", got)
	}
	if got := testutil.ToFloat64(w.m.AuditChecked); got != 22 {
		t.Errorf("second pass: stream_audit_checks_total = %v, want 22", got)
	}
}

// Ledger ids are max(id)+1: once retention removed the newest rows, new
// rows take ids at or below the audit's position. The audit notices and
// starts its pass again instead of skipping them until the next one.
func TestAuditFollowsIdsThatRestart(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	first := []string{"a", "b", "c"}
	w.create(t, first...)
	w.allPublished(t, first)
	clock := time.Now().Add(10 * time.Minute)
	a, err := audit.New(archetype.Archetype{Logger: w.log, Metrics: w.m, Now: func() time.Time { return clock }}, audit.Config{After: 5 * time.Minute}, w.l, w.check, func() bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Round(ctx); err != nil { // the pass is now past c
		t.Fatal(err)
	}
	checked := testutil.ToFloat64(w.m.AuditChecked)
	// All three are delivered and retention removes them (a day later).
	for _, id := range first {
		if err := w.l.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: "local", State: string(request.StatusDelivered), Attempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := w.l.Prune(ctx, time.Now().Add(time.Hour), 100); err != nil || n != 3 {
		t.Fatalf("Prune = %d, %v; want 3", n, err)
	}
	// New requests take the ids the pruned ones had; the stream loses one.
	w.create(t, "d", "e")
	w.allPublished(t, []string{"d", "e"})
	w.lose(t, "e")
	clock = clock.Add(10 * time.Minute)
	for range 3 {
		if _, err := a.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(w.m.AuditChecked) - checked; got != 2 {
		t.Errorf("%v of the 2 new rows looked up", got)
	}
	w.wantRepublished(t, []string{"d", "e"}, "e")
}

// A row is audited only once it was published After ago: until then a pass
// waits at it, and then takes it up.
func TestAuditWaitsForRowsToAge(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.create(t, "a", "b")
	w.allPublished(t, []string{"a", "b"})
	w.lose(t, "a", "b")
	clock := time.Now()
	a, err := audit.New(archetype.Archetype{Logger: w.log, Metrics: w.m, Now: func() time.Time { return clock }}, audit.Config{After: time.Minute}, w.l, w.check, func() bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if more, err := a.Round(ctx); err != nil || more {
		t.Fatalf("Round = %v, %v", more, err)
	}
	if got := testutil.ToFloat64(w.m.AuditChecked); got != 0 {
		t.Fatalf("rows published less than After ago were checked (%v)", got)
	}
	clock = clock.Add(time.Minute)
	if _, err := a.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(w.m.StreamLost); got != 2 {
		t.Errorf("stream_lost_messages_total = %v, want 2 once both rows are After old", got)
	}
}

// A request whose delivery record is unsettled (retrying, or an attempt
// with unknown outcome) and has not been written for After is looked up
// too: its message may have expired while the downstream was down. A record
// written recently, or a settled one, is not.
func TestAuditLooksUpDeliveriesGoneQuiet(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	ids := []string{"quiet-retrying", "recent-retrying", "delivered", "quiet-attempting"}
	w.create(t, ids...)
	w.allPublished(t, ids)
	w.lose(t, ids...)
	start := time.Now()
	record := func(id, state string, at time.Time) {
		t.Helper()
		l := ledger.New(w.db, w.wr, func() time.Time { return at })
		if err := l.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: "local", State: state, Attempts: 3}); err != nil {
			t.Fatal(err)
		}
	}
	record("quiet-retrying", string(request.StatusRetrying), start)
	record("recent-retrying", string(request.StatusRetrying), start.Add(9*time.Minute))
	record("delivered", string(request.StatusDelivered), start)
	record("quiet-attempting", request.DeliveryAttempting, start)

	a, err := audit.New(archetype.Archetype{Logger: w.log, Metrics: w.m, Now: func() time.Time { return start.Add(10 * time.Minute) }}, audit.Config{After: 5 * time.Minute}, w.l, w.check, func() bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(w.m.AuditChecked); got != 2 {
		t.Errorf("stream_audit_checks_total = %v, want 2 (the quiet unsettled ones)", got)
	}
	w.wantRepublished(t, ids, "quiet-retrying", "quiet-attempting")
}

func TestConfigRejectsNonsense(t *testing.T) {
	for _, c := range []audit.Config{{After: -time.Second}, {Interval: -1}, {Batch: -1}, {Rescan: -time.Hour}} {
		if _, err := audit.New(archetype.Archetype{}, c, nil, nil, nil); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

// A published request that was never attempted, for a target no running
// dispatcher delivers to (mcp-front and the dispatcher given different
// -config files), is counted and reported; one a dispatcher serves is not.
func TestAuditReportsUnservedTargets(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	if err := w.l.NewPresence("d1", []string{"hook"}, "").Announce(ctx); err != nil {
		t.Fatal(err)
	}
	w.create(t, "a")
	w.allPublished(t, []string{"a"})
	clock := time.Now()
	a, err := audit.New(archetype.Archetype{Logger: w.log, Metrics: w.m, Now: func() time.Time { return clock }}, audit.Config{After: time.Minute}, w.l, w.check, func() bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Minute)
	if _, err := a.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(w.m.Unserved.WithLabelValues("local")); got != 1 {
		t.Fatalf("stream_audit_unserved_total{target=local} = %v, want 1", got)
	}

	if err := w.l.NewPresence("d2", []string{"local"}, "").Announce(ctx); err != nil {
		t.Fatal(err)
	}
	w.create(t, "b")
	w.allPublished(t, []string{"b"})
	clock = time.Now().Add(time.Minute)
	if _, err := a.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(w.m.Unserved.WithLabelValues("local")); got != 1 {
		t.Errorf("stream_audit_unserved_total{target=local} = %v after a dispatcher serving local announced itself, want still 1", got)
	}
	if got := testutil.ToFloat64(w.m.AuditChecked); got != 2 {
		t.Errorf("stream_audit_checks_total = %v, want 2: both rows are still looked up in the stream", got)
	}
}
