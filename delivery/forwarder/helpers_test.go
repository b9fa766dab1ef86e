package forwarder_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/delivery/natsjs"
	"ticketrelay/front/advice"
	"ticketrelay/front/mcptools"
	"ticketrelay/internal/archetype"
	"ticketrelay/internal/backoff"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/store/outbox"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/fixture"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// testLogger is quiet (the tests provoke errors on purpose) unless
// TICKETRELAY_TEST_LOG is set.
func testLogger() *slog.Logger {
	level := slog.LevelError + 4
	if os.Getenv("TICKETRELAY_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// testConfig is the forwarder configuration of most tests: fast retries.
func testConfig() forwarder.Config {
	return forwarder.Config{
		Workers:         2,
		DeliveryTimeout: 10 * time.Second,
		Retry:           backoff.Policy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond},
	}
}

// env is the dispatcher side of ticketrelay, for real: a SQLite ledger in a
// temporary directory and an embedded nats-server with JetStream.
type env struct {
	db  *sqlitedb.DB
	w   *sqlitedb.Writer
	l   *ledger.Ledger
	m   *metrics.Dispatcher
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	log := testLogger()
	n := fixture.StartNATSWithStream(t, natsjs.StreamConfig{})
	m := metrics.NewDispatcher(prometheus.NewRegistry())
	l := fixture.NewLedger(t, fixture.Logger(log), fixture.WriterMetrics(m.Writer))
	db, w := l.DB, l.Writer
	e := &env{db: db, w: w, l: l.Ledger, m: m, nc: n.Conn, js: n.JS, log: log}

	// The real relay publishes committed outbox rows (Nats-Msg-Id = request_id).
	relay, err := outbox.NewRelay(archetype.Archetype{Logger: log, Metrics: m}, outbox.RelayConfig{Holder: "test-" + t.Name(), PollInterval: 5 * time.Millisecond},
		db.Reader(), w, natsjs.NewPublisher(n.JS))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, "relay", relay.Run)
	return e
}

// runInBackground runs fn until the test ends; the test fails if fn returns
// an error.
func runInBackground(t *testing.T, name string, fn func(context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				err = fmt.Errorf("%s did not return within 20s of cancellation", name)
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	return stop
}

// startForwarder runs a real forwarder for targets until the test ends.
func (e *env) startForwarder(t *testing.T, cfg forwarder.Config, targets ...downstream.Target) (stop func() error) {
	t.Helper()
	f := forwarder.New(archetype.Archetype{Logger: e.log, Metrics: e.m}, cfg, e.js, e.l, targets)
	return runInBackground(t, "forwarder", f.Run)
}

// createAttempted accepts a ticket for target whose first attempt ended
// without an answer, as a dispatcher that died mid-call an hour ago leaves
// it (a claim younger than DeliveryTimeout may stand for a call still
// running: see TestClaimOfARunningCallIsLeftAlone).
func (e *env) createAttempted(t *testing.T, target string) string {
	t.Helper()
	return e.createClaimed(t, target, time.Now().Add(-time.Hour))
}

// createClaimed accepts a ticket for target and records its first attempt
// as claimed at the time at.
func (e *env) createClaimed(t *testing.T, target string, at time.Time) string {
	t.Helper()
	id := e.create(t, target)
	then := ledger.New(e.db, e.w, func() time.Time { return at })
	if err := then.RecordDelivery(context.Background(), request.Delivery{RequestID: id, Target: target, State: request.DeliveryAttempting, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	return id
}

// create accepts a ticket for target through the ledger, as mcp-front does.
func (e *env) create(t *testing.T, target string) string {
	t.Helper()
	id := uuid.NewString()
	r := ticket.Request{RequestID: id, Tool: "create_ticket", Target: target, Title: "Ticket " + id[:8], Body: "body"}
	if err := r.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Create(context.Background(), r); err != nil {
		t.Fatalf("create: %v", err)
	}
	return id
}

// find is what find_request answers of id: the ledger's status, with the
// detail the front writes from it (advice.Advise).
func (e *env) find(t *testing.T, id string) mcptools.RequestStatus {
	t.Helper()
	st, err := e.l.Find(context.Background(), "", id)
	if err != nil {
		t.Fatalf("find %s: %v", id, err)
	}
	return mcptools.RequestStatus{Report: st, Detail: advice.Advise(st)}
}

// waitFor waits for cond with a deadline (see testkit/testwait).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, timeout, what, cond)
}

func (e *env) waitStatus(t *testing.T, id string, want request.Status) mcptools.RequestStatus {
	t.Helper()
	var st mcptools.RequestStatus
	waitFor(t, 15*time.Second, fmt.Sprintf("request %s to be %s", id, want), func() bool {
		st = e.find(t, id)
		return st.Status == want
	})
	return st
}

// waitConsumerIdle waits until target's consumer has nothing pending and
// nothing unacknowledged: every message was acked or terminated.
func (e *env) waitConsumerIdle(t *testing.T, target string) {
	t.Helper()
	var last *jetstream.ConsumerInfo
	waitFor(t, 15*time.Second, "consumer of "+target+" to be idle", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := e.js.Consumer(ctx, "TICKETS", forwarder.ConsumerName(target))
		if err != nil {
			return false
		}
		last, err = c.Info(ctx)
		return err == nil && last.NumAckPending == 0 && last.NumPending == 0 && last.Delivered.Stream > 0
	})
}

// payload is the outbox payload of id, as the relay publishes it.
func (e *env) payload(t *testing.T, id string) []byte {
	t.Helper()
	var p []byte
	if err := e.db.Reader().QueryRow(`SELECT payload FROM outbox WHERE request_id = ?`, id).Scan(&p); err != nil {
		t.Fatalf("outbox payload of %s: %v", id, err)
	}
	return p
}

func (e *env) publishRaw(t *testing.T, subject, msgID string, data []byte) {
	t.Helper()
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	ack, err := e.js.PublishMsg(context.Background(), m)
	if err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	if ack.Duplicate {
		t.Fatalf("publish %s: JetStream dropped it as a duplicate", subject)
	}
}

// ---- test doubles of third-party APIs ----

// behaviour is what a fake API does with one call, decided by its hook.
type behaviour int

const (
	act        behaviour = iota // create the item (or find it by key) and answer
	failBefore                  // answer err without creating anything
	actAndLose                  // create the item, then answer err (the response was lost)
)

// apiCall is the record of one call to a fake API.
type apiCall struct {
	D          downstream.Delivery
	Start, End time.Time
	CtxErr     error // the call's context error when it returned
}

// fakeAPI stands for an external ticketing API. With keyed it behaves like
// an API that takes an idempotency key: a second create with the same key
// returns the first item. Without, every create makes a new item.
type fakeAPI struct {
	name  string
	caps  downstream.Capabilities
	keyed bool
	// hook decides what call n (1-based) does; nil acts on every call. It
	// may block (it gets the call's context).
	hook func(ctx context.Context, n int, d downstream.Delivery) (behaviour, error)

	mu    sync.Mutex
	calls []apiCall
	items []item          // everything ever created, in order
	byKey map[string]item // the API's own index (its idempotency store or external reference)
}

type item struct {
	Key     string
	Receipt downstream.Receipt
	Title   string
}

func newKeyedAPI(name string) *fakeAPI {
	return &fakeAPI{name: name, keyed: true, caps: downstream.Capabilities{DedupeKey: true, Lookup: downstream.LookupNone}, byKey: map[string]item{}}
}

func newUnkeyedAPI(name string) *fakeAPI {
	return &fakeAPI{name: name, caps: downstream.Capabilities{DedupeKey: false, Lookup: downstream.LookupNone}, byKey: map[string]item{}}
}

func (a *fakeAPI) Name() string                          { return a.name }
func (a *fakeAPI) Capabilities() downstream.Capabilities { return a.caps }

func (a *fakeAPI) Deliver(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	a.mu.Lock()
	n := len(a.calls) + 1
	a.calls = append(a.calls, apiCall{D: d, Start: time.Now()})
	hook := a.hook
	a.mu.Unlock()

	b, err := act, error(nil)
	if hook != nil {
		b, err = hook(ctx, n, d)
	}
	var r downstream.Receipt
	if b != failBefore {
		r = a.store(d)
	}
	a.mu.Lock()
	a.calls[n-1].End = time.Now()
	a.calls[n-1].CtxErr = ctx.Err()
	a.mu.Unlock()
	if b == act {
		return r, nil
	}
	if err == nil {
		err = errors.New("hook returned no error")
	}
	return downstream.Receipt{}, err
}

// store creates the item, or with a key it already knows, returns it.
func (a *fakeAPI) store(d downstream.Delivery) downstream.Receipt {
	a.mu.Lock()
	defer a.mu.Unlock()
	if it, ok := a.byKey[d.Key]; ok && a.keyed {
		return it.Receipt
	}
	id := fmt.Sprintf("%s-%d", a.name, len(a.items)+1)
	it := item{Key: d.Key, Title: d.Ticket.Title, Receipt: downstream.Receipt{ExternalID: id, URL: "https://" + a.name + ".example/items/" + id}}
	a.items = append(a.items, it)
	a.byKey[d.Key] = it
	return it.Receipt
}

// seed puts an item in the API as if an earlier, unrecorded call made it.
func (a *fakeAPI) seed(key string) downstream.Receipt {
	return a.store(downstream.Delivery{Key: key, Ticket: ticket.Ticket{Request: ticket.Request{Title: "seeded"}}})
}

func (a *fakeAPI) Calls() []apiCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]apiCall(nil), a.calls...)
}

func (a *fakeAPI) Items() []item {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]item(nil), a.items...)
}

// lookupAPI is an API without an idempotency key but with a consistent
// search by external reference (the key is stored on the item).
type lookupAPI struct {
	*fakeAPI
	findHook func(ctx context.Context, d downstream.Delivery) error

	fmu   sync.Mutex
	finds []downstream.Delivery
}

var _ downstream.Finder = (*lookupAPI)(nil)

func newLookupAPI(name string) *lookupAPI {
	a := newUnkeyedAPI(name)
	a.caps.Lookup = downstream.LookupConsistent
	return &lookupAPI{fakeAPI: a}
}

func (a *lookupAPI) Find(ctx context.Context, d downstream.Delivery) (downstream.Receipt, bool, error) {
	a.fmu.Lock()
	a.finds = append(a.finds, d)
	hook := a.findHook
	a.fmu.Unlock()
	if hook != nil {
		if err := hook(ctx, d); err != nil {
			return downstream.Receipt{}, false, err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	it, ok := a.byKey[d.Key]
	return it.Receipt, ok, nil
}

func (a *lookupAPI) Finds() []downstream.Delivery {
	a.fmu.Lock()
	defer a.fmu.Unlock()
	return append([]downstream.Delivery(nil), a.finds...)
}

// gate lets a test hold a call inside a fake API: the call reports that it
// arrived and waits until the test opens the gate (or its context ends).
type gate struct {
	arrived chan struct{}
	open    chan struct{}
	aOnce   sync.Once
	oOnce   sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{arrived: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(g.Open) // never leave a call blocked behind a failed test
	return g
}

func (g *gate) Wait(ctx context.Context) {
	g.aOnce.Do(func() { close(g.arrived) })
	select {
	case <-g.open:
	case <-ctx.Done():
	}
}

func (g *gate) Open() { g.oOnce.Do(func() { close(g.open) }) }

func (g *gate) WaitArrived(t *testing.T) {
	t.Helper()
	select {
	case <-g.arrived:
	case <-time.After(15 * time.Second):
		t.Fatal("timed out waiting for the call to reach the API")
	}
}

func transient(status int, msg string) error {
	return &downstream.Error{Class: downstream.Transient, StatusCode: status, Err: errors.New(msg)}
}
