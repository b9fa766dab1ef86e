package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/internal/archetype"
	"ticketrelay/store/ledger"
	"ticketrelay/store/outbox"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// pendingRows reads the unpublished outbox rows as the relay would.
func pendingRows(t *testing.T, db *sql.DB) []outbox.Message {
	t.Helper()
	rs, err := db.Query(`SELECT id, request_id, subject, payload, created_at FROM outbox WHERE published_at IS NULL ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var msgs []outbox.Message
	for rs.Next() {
		var m outbox.Message
		var created int64
		if err := rs.Scan(&m.ID, &m.RequestID, &m.Subject, &m.Payload, &created); err != nil {
			t.Fatal(err)
		}
		m.CreatedAt = time.Unix(0, created)
		msgs = append(msgs, m)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return msgs
}

func TestRelayPublishesCommittedRows(t *testing.T) {
	b := startBroker(t)
	js := b.connect(t)
	path := filepath.Join(t.TempDir(), "tickets.db")
	n := newNode(t, "relay-a", path, js, outbox.RelayConfig{}, time.Now)
	db := fixture.Raw(t, path)

	before := time.Now()
	var want []string
	for i, id := range ids("early", 20) {
		target := []string{"local", "jira"}[i%2]
		if _, err := n.l.Create(testCtx(t), newRequest(id, target)); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	n.run(t)
	waitFor(t, 10*time.Second, "the relay to hold its lease", func() bool { return value(t, n.m.LeaseHeld) == 1 })
	// Rows committed while the relay runs go out too.
	late := ids("late", 10)
	n.create(t, late...)
	want = append(want, late...)
	// The relay counts a batch right after its mark commits: wait for both.
	waitFor(t, 10*time.Second, "an empty outbox and 30 commit-to-ack observations", func() bool {
		return backlog(t, db) == 0 && value(t, n.m.CommitToAck) == 30
	})
	after := time.Now()
	payloads := map[string][]byte{}
	rs, err := db.Query(`SELECT request_id, payload FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var id string
		var p []byte
		if err := rs.Scan(&id, &p); err != nil {
			t.Fatal(err)
		}
		payloads[id] = p
	}
	if err := errors.Join(rs.Err(), rs.Close()); err != nil {
		t.Fatal(err)
	}

	byID := streamMessages(t, js)
	if len(byID) != len(want) || countMsgs(byID) != len(want) {
		t.Fatalf("stream holds %d messages under %d ids, want %d", countMsgs(byID), len(byID), len(want))
	}
	for _, id := range want {
		ms := byID[id]
		if len(ms) != 1 {
			t.Errorf("%s stored %d times", id, len(ms))
			continue
		}
		m := ms[0]
		var ref ticket.Ref
		if err := json.Unmarshal(m.Data, &ref); err != nil {
			t.Fatalf("%s: payload %s: %v", id, m.Data, err)
		}
		if !bytes.Equal(m.Data, payloads[id]) || ref.RequestID != id || ref.TicketID != ticket.IDFor(id) {
			t.Errorf("%s: stored payload %s, outbox payload %s", id, m.Data, payloads[id])
		}
		var target string
		if err := db.QueryRow(`SELECT target FROM requests WHERE request_id = ?`, id).Scan(&target); err != nil {
			t.Fatal(err)
		}
		if m.Subject != outbox.SubjectFor(target) {
			t.Errorf("%s: subject %s for target %s", id, m.Subject, target)
		}
		at, found, err := publishedAt(t, db, id)
		if err != nil || !found || at.Before(before) || at.After(after) {
			t.Errorf("%s: published_at %v (found %v, %v), want between %v and %v", id, at, found, err, before, after)
		}
	}

	if got := value(t, n.m.Dispatched.WithLabelValues("local")); got != 20 {
		t.Errorf("dispatched{local} = %v, want 20", got)
	}
	if got := value(t, n.m.Dispatched.WithLabelValues("jira")); got != 10 {
		t.Errorf("dispatched{jira} = %v, want 10", got)
	}
	if got := value(t, n.m.CommitToAck); got != 30 {
		t.Errorf("commit_to_ack observations = %v, want 30", got)
	}
	if d, e := value(t, n.m.DuplicateAcks), value(t, n.m.PublishErrors); d != 0 || e != 0 {
		t.Errorf("duplicate acks %v, publish errors %v; want 0 and 0", d, e)
	}

	n.stop(t)
	if got := value(t, n.m.LeaseHeld); got != 0 {
		t.Errorf("lease gauge = %v after Run returned", got)
	}
	var leases int
	if err := db.QueryRow(`SELECT count(*) FROM leases`).Scan(&leases); err != nil || leases != 0 {
		t.Errorf("%d lease rows after a clean stop (%v), want 0", leases, err)
	}
}

// A relay that crashed after JetStream acknowledged its batch and before it
// marked the rows publishes them again: JetStream drops them by Nats-Msg-Id.
func TestRelayRepublishAfterCrashIsDeduplicated(t *testing.T) {
	b := startBroker(t)
	js := b.connect(t)
	path := filepath.Join(t.TempDir(), "tickets.db")
	n := newNode(t, "relay-a", path, js, outbox.RelayConfig{BatchSize: 8}, time.Now)
	db := fixture.Raw(t, path)
	all := ids("req", 20)
	n.create(t, all...)

	// The crashed relay's publishes: 12 of the 20 rows reached JetStream.
	first := pendingRows(t, db)[:12]
	for i, r := range natsjs.NewPublisher(js).Publish(testCtx(t), first) {
		if r.Err != nil || r.Duplicate {
			t.Fatalf("direct publish %d: %+v", i, r)
		}
	}
	if backlog(t, db) != 20 {
		t.Fatal("publishing alone marked rows")
	}

	n.run(t)
	// The relay counts a batch right after its mark commits: wait for both.
	waitFor(t, 10*time.Second, "an empty outbox and 20 dispatched", func() bool {
		return backlog(t, db) == 0 && value(t, n.m.Dispatched) == 20
	})
	if got := value(t, n.m.DuplicateAcks); got != 12 {
		t.Errorf("duplicate acks = %v, want 12", got)
	}
	if got := value(t, n.m.Dispatched); got != 20 {
		t.Errorf("dispatched = %v, want 20 (duplicate acks are successes)", got)
	}
	if got := value(t, n.m.PublishErrors); got != 0 {
		t.Errorf("publish errors = %v", got)
	}
	byID := streamMessages(t, js)
	for _, id := range all {
		if len(byID[id]) != 1 {
			t.Errorf("%s stored %d times, want once", id, len(byID[id]))
		}
	}
	if countMsgs(byID) != 20 {
		t.Errorf("stream holds %d messages, want 20", countMsgs(byID))
	}
}

func TestRelaySurvivesBrokerOutage(t *testing.T) {
	b := startBroker(t)
	// As the dispatcher: publishes that get no ack in time fail.
	js := b.connect(t, jetstream.WithPublishAsyncTimeout(500*time.Millisecond))
	path := filepath.Join(t.TempDir(), "tickets.db")
	n := newNode(t, "relay-a", path, js, outbox.RelayConfig{}, time.Now)
	db := fixture.Raw(t, path)
	n.run(t)

	before := ids("before", 10)
	n.create(t, before...)
	waitFor(t, 10*time.Second, "the first rows to be published", func() bool { return backlog(t, db) == 0 })

	b.stop()
	during := ids("during", 15)
	n.create(t, during...) // the ledger accepts while the broker is down
	waitFor(t, 10*time.Second, "publish errors to be counted", func() bool { return value(t, n.m.PublishErrors) > 0 })
	if got := backlog(t, db); got != 15 {
		t.Fatalf("backlog = %d while the broker is down, want the 15 new rows", got)
	}
	for _, id := range during {
		if at, _, _ := publishedAt(t, db, id); !at.IsZero() {
			t.Fatalf("%s marked published at %v without an ack", id, at)
		}
	}

	b.start(t) // same store, same port
	// Dispatched moves just after each mark commits: wait for both.
	waitFor(t, 20*time.Second, "the outbox to drain after the broker came back", func() bool {
		return backlog(t, db) == 0 && value(t, n.m.Dispatched) >= 25
	})
	byID := streamMessages(t, js)
	for _, id := range append(before, during...) {
		if len(byID[id]) != 1 {
			t.Errorf("%s stored %d times, want exactly once", id, len(byID[id]))
		}
	}
	if countMsgs(byID) != 25 {
		t.Errorf("stream holds %d messages, want 25", countMsgs(byID))
	}
	if got := value(t, n.m.Dispatched); got != 25 {
		t.Errorf("dispatched = %v, want 25", got)
	}
	t.Logf("publish errors %v, duplicate acks %v", value(t, n.m.PublishErrors), value(t, n.m.DuplicateAcks))
}

func TestRelayConfigValidation(t *testing.T) {
	for name, cfg := range map[string]outbox.RelayConfig{
		"no holder":       {},
		"negative batch":  {Holder: "h", BatchSize: -1},
		"negative poll":   {Holder: "h", PollInterval: -time.Second},
		"lease under 1 s": {Holder: "h", LeaseTTL: 500 * time.Millisecond},
		"negative rescan": {Holder: "h", RescanEvery: -time.Second},
	} {
		if _, err := outbox.NewRelay(archetype.Archetype{Logger: discard()}, cfg, nil, nil, nil); err == nil {
			t.Errorf("%s: NewRelay accepted %+v", name, cfg)
		}
	}
	d := outbox.RelayConfig{}.WithDefaults()
	if d.BatchSize != 512 || d.PollInterval != 20*time.Millisecond || d.BusyPollInterval != 2*time.Millisecond ||
		d.BusyFor != time.Second || d.LeaseTTL != 15*time.Second || d.GaugeInterval != time.Second || d.RescanEvery != time.Second {
		t.Errorf("defaults = %+v", d)
	}
}

// For BusyFor after it last published, the relay keeps looking at the busy
// interval even when rounds find nothing: a row committed then is published
// without waiting out the (here one-minute) idle interval.
func TestRelayStaysBusyAfterPublishing(t *testing.T) {
	b := startBroker(t)
	path := filepath.Join(t.TempDir(), "tickets.db")
	// Gauges refreshed every round: the backlog gauge shows when a round
	// began after the first row was marked.
	n := newNode(t, "relay-busy", path, b.connect(t),
		outbox.RelayConfig{PollInterval: time.Minute, BusyFor: time.Minute, GaugeInterval: time.Nanosecond}, time.Now)
	db := fixture.Raw(t, path)
	published := func(id string) func() bool { return func() bool { return marked(t, db, id) } }
	n.create(t, "first")
	n.run(t)
	waitFor(t, 10*time.Second, "the first row to be published", published("first"))
	// A round found nothing, as between the tickets of a slow but steady
	// stream; only then the next row comes.
	waitFor(t, 10*time.Second, "an empty round", func() bool { return value(t, n.m.OutboxBacklog) == 0 })
	n.create(t, "second")
	waitFor(t, 10*time.Second, "the second row to be published within the busy window", published("second"))
}

// overlapCounter is the real publisher, counting how many batches it has
// in flight at once.
type overlapCounter struct {
	outbox.Publisher
	now, peak atomic.Int32
}

func (o *overlapCounter) Publish(ctx context.Context, msgs []outbox.Message) []outbox.PublishResult {
	n := o.now.Add(1)
	defer o.now.Add(-1)
	for p := o.peak.Load(); n > p && !o.peak.CompareAndSwap(p, n); p = o.peak.Load() {
	}
	return o.Publisher.Publish(ctx, msgs)
}

// A backlog goes out in overlapping batches, each row once: a batch in
// flight is not read again by the next, not even by the rounds after the
// backlog that read from the start again.
func TestRelayPipelinesABacklogWithoutRepeats(t *testing.T) {
	b := startBroker(t)
	js := b.connect(t)
	path := filepath.Join(t.TempDir(), "tickets.db")
	pub := &overlapCounter{Publisher: natsjs.NewPublisher(js)}
	n := newNodeWith(t, "relay-pipe", path, pub, outbox.RelayConfig{BatchSize: 8, Pipeline: 3}, time.Now)
	db := fixture.Raw(t, path)
	backlogIDs := ids("backlog", 8*25+5)
	n.create(t, backlogIDs...)

	n.run(t)
	waitFor(t, 20*time.Second, "the backlog to be published and marked", func() bool {
		return backlog(t, db) == 0 && value(t, n.m.CommitToAck) >= float64(len(backlogIDs))
	})
	if got := value(t, n.m.DuplicateAcks); got != 0 {
		t.Errorf("%v duplicate acks: rows in flight were read and published again", got)
	}
	if got := value(t, n.m.PublishErrors); got != 0 {
		t.Errorf("%v publish errors", got)
	}
	byID := streamMessages(t, js)
	if len(byID) != len(backlogIDs) || countMsgs(byID) != len(backlogIDs) {
		t.Errorf("stream holds %d messages under %d ids, want %d", countMsgs(byID), len(byID), len(backlogIDs))
	}
	if p := pub.peak.Load(); p < 2 || p > 3 {
		t.Errorf("at most %d batches were in flight at once, want 2 or 3 (Pipeline 3)", p)
	}
}

// A relay with a wake-up socket reads a row committed by another process's
// writer (mcp-front's, which wakes it after each commit) at once: its poll
// is an hour here and its busy polling ends a nanosecond after a row, so
// only the wake-up explains the publish. A relay that stops removes its
// socket.
func TestRelayIsWokenByAnotherWritersCommit(t *testing.T) {
	b := startBroker(t)
	dir, err := os.MkdirTemp("", "relay-wake") // short: a socket path must fit sun_path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "tickets.db")
	wake := outbox.WakeupPath(path)
	n := newNode(t, "relay-woken", path, b.connect(t),
		outbox.RelayConfig{PollInterval: time.Hour, BusyFor: time.Nanosecond, WakeupPath: wake}, time.Now)
	front := frontLedger(t, path, outbox.NewWaker(wake))
	db := fixture.Raw(t, path)

	if _, err := front.Create(testCtx(t), newRequest("first", "local")); err != nil {
		t.Fatal(err)
	}
	n.run(t)
	waitFor(t, 10*time.Second, "the first row to be published", func() bool { return marked(t, db, "first") })
	if fi, err := os.Lstat(wake); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("no wake-up socket at %s while the relay holds the lease: %v", wake, err)
	}
	for _, id := range []string{"second", "third"} {
		if _, err := front.Create(testCtx(t), newRequest(id, "local")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, id+" to be published after the wake-up", func() bool { return marked(t, db, id) })
	}
	if got := value(t, n.m.RelayWakeups); got < 2 {
		t.Errorf("relay_wakeups_total = %v, want at least the two commits after the first", got)
	}
	n.stop(t)
	if _, err := os.Lstat(wake); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket after the relay stopped: %v, want it removed", err)
	}
}

// frontLedger is mcp-front's side of the database at path: a ledger with a
// writer of its own that wakes the relay after each commit.
func frontLedger(t *testing.T, path string, w *outbox.Waker) *ledger.Ledger {
	t.Helper()
	t.Cleanup(w.Close) // after the writer's cleanup: it wakes w until it closes
	return fixture.NewLedger(t, fixture.At(path), fixture.WriterOptions(sqlitedb.AfterCommit(w.Wake))).Ledger
}
