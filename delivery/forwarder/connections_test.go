package forwarder_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/delivery/targets"
	"ticketrelay/internal/archetype"
	"ticketrelay/store/outbox"
	"ticketrelay/testkit/conntest"
)

// hookReceiver is a webhook receiver in the test's process that counts the
// connections it is given and sees closed (http.Server.ConnState), the
// open-connections gauge as each post arrives, and when each post arrived.
type hookReceiver struct {
	srv   *httptest.Server
	gauge func() float64 // read as each post arrives (nil: not read)
	delay time.Duration  // how long each answer takes, as a remote API's would
	conns conntest.Conns

	mu            sync.Mutex
	inFlight      int
	maxInFlight   int
	maxGauge      float64
	posts         int
	keys          map[string]int
	arrivals      []time.Time
	firstAt       map[string]time.Time // by Idempotency-Key
	undecodedBody int
}

func newHookReceiver(t *testing.T) *hookReceiver {
	t.Helper()
	h := &hookReceiver{keys: map[string]int{}, firstAt: map[string]time.Time{}}
	h.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		var body struct {
			Data struct {
				RequestID string `json:"request_id"`
			} `json:"data"`
		}
		err := json.NewDecoder(r.Body).Decode(&body)
		h.mu.Lock()
		h.posts++
		h.arrivals = append(h.arrivals, now)
		key := r.Header.Get("Idempotency-Key")
		h.keys[key]++
		if _, ok := h.firstAt[key]; !ok {
			h.firstAt[key] = now
		}
		if err != nil {
			h.undecodedBody++
		}
		if h.gauge != nil {
			h.maxGauge = max(h.maxGauge, h.gauge())
		}
		h.inFlight++
		h.maxInFlight = max(h.maxInFlight, h.inFlight)
		h.mu.Unlock()
		if h.delay > 0 { // an API's latency
			select {
			case <-time.After(h.delay):
			case <-r.Context().Done():
			}
		}
		h.mu.Lock()
		h.inFlight--
		h.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	h.srv.Config.ConnState = h.conns.Hook
	h.srv.Start()
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) distinctKeys() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.keys)
}

// createMany accepts n tickets for target, from a few goroutines so that
// the ledger's writer commits them in groups.
func (e *env) createMany(t *testing.T, target string, n int) []string {
	t.Helper()
	const writers = 8
	ids := make([][]string, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				ids[w] = append(ids[w], e.create(t, target))
			}
		})
	}
	wg.Wait()
	var all []string
	for _, part := range ids {
		all = append(all, part...)
	}
	return all
}

// startTracedForwarder is startForwarder with the forwarder's calls
// traced by tr (a value of Run's context, which reaches every call).
func (e *env) startTracedForwarder(t *testing.T, cfg forwarder.Config, tr *conntest.Trace, targets ...downstream.Target) (stop func() error) {
	t.Helper()
	f := forwarder.New(archetype.Archetype{Logger: e.log, Metrics: e.m}, cfg, e.js, e.l, targets)
	return runInBackground(t, "forwarder", func(ctx context.Context) error { return f.Run(tr.Context(ctx)) })
}

// hookPool is what conntest.CheckPool checks of the calls traced by tr to
// rcv through target hook's pool of limit connections.
func (e *env) hookPool(rcv *hookReceiver, tr *conntest.Trace, limit int) conntest.Pool {
	return conntest.Pool{
		Limit:  limit,
		Trace:  tr,
		Server: &rcv.conns,
		Opened: func() float64 { return testutil.ToFloat64(e.m.ConnectionsOpened.WithLabelValues("hook")) },
		Open:   e.hookOpen,
	}
}

// hookOpen reads target hook's open-connections gauge.
func (e *env) hookOpen() float64 {
	return testutil.ToFloat64(e.m.ConnectionsOpen.WithLabelValues("hook"))
}

// A backlog delivered through the real forwarder to a webhook opened as
// the dispatcher opens it reuses its connections: however many tickets,
// the pool turns no connection away, no more than the workers stay open,
// and the open-connections gauge exceeds the workers (MaxConnsPerHost)
// only by connections being closed. With Go's default transport (2 idle
// connections per host) most posts came on a new connection. A new
// connection beyond the workers is no failure: under load net/http drops
// a connection whose write it has not heard of in time (conntest).
func TestBacklogReusesConnections(t *testing.T) {
	t.Parallel()
	const n, workers = 600, 8
	e := newEnv(t)
	rcv := newHookReceiver(t)
	rcv.gauge = e.hookOpen
	tgs, closeTargets, err := targets.Open([]targets.Def{{Name: "hook", Kind: "webhook", Endpoint: rcv.srv.URL}}, t.TempDir(), time.Now,
		targets.WithWorkers(workers), targets.WithMetrics(e.m))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeTargets() })
	ids := e.createMany(t, "hook", n)
	cfg := testConfig()
	cfg.Workers = workers
	var tr conntest.Trace
	stop := e.startTracedForwarder(t, cfg, &tr, tgs...)
	waitFor(t, 60*time.Second, "every ticket at the receiver", func() bool { return rcv.distinctKeys() == n })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[:10] {
		e.waitStatus(t, id, "delivered")
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if rcv.posts != n || rcv.undecodedBody != 0 {
		t.Errorf("%d posts (%d undecodable) for %d tickets", rcv.posts, rcv.undecodedBody, n)
	}
	conntest.CheckPool(t, e.hookPool(rcv, &tr, workers), rcv.maxGauge)
	// A backlog is pulled many messages at a time: the messages of a pull
	// go to the workers in the groups they arrived in, and a group's
	// records are read together (readAhead), and still each ticket is
	// posted once (above). Handed over one by one, a message was taken by
	// an idle worker alone and read alone: a third of a backlog's.
	ahead := testutil.ToFloat64(e.m.ReadAhead.WithLabelValues("hook"))
	t.Logf("%v of %d attempts used a record read ahead", ahead, n)
	if ahead < 0.9*n {
		t.Errorf("%v attempts used a record read ahead, want at least 90%% of %d", ahead, n)
	}
}

// Against an API that answers in 40 ms whatever the load, the limit on
// calls in flight starts at forwarder.StartConcurrency and climbs toward the
// default workers: more calls at once are more tickets a second there.
// Still every ticket is posted once, and the pool keeps its connections,
// no more than the workers.
func TestSlowAPIGetsMoreCallsInFlight(t *testing.T) {
	t.Parallel()
	const n = 800
	e := newEnv(t)
	rcv := newHookReceiver(t)
	rcv.delay = 40 * time.Millisecond
	rcv.gauge = e.hookOpen
	tgs, closeTargets, err := targets.Open([]targets.Def{{Name: "hook", Kind: "webhook", Endpoint: rcv.srv.URL}}, t.TempDir(), time.Now,
		targets.WithWorkers(forwarder.DefaultWorkers), targets.WithMetrics(e.m))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeTargets() })
	e.createMany(t, "hook", n)
	cfg := testConfig()
	cfg.Workers = 0 // the default
	var tr conntest.Trace
	stop := e.startTracedForwarder(t, cfg, &tr, tgs...)
	waitFor(t, 60*time.Second, "every ticket at the receiver", func() bool { return rcv.distinctKeys() == n })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	limit := testutil.ToFloat64(e.m.ConcurrencyLimit.WithLabelValues("hook"))
	t.Logf("%d posts, at most %d at once, limit %v at the end", rcv.posts, rcv.maxInFlight, limit)
	if rcv.posts != n {
		t.Errorf("%d posts for %d tickets", rcv.posts, n)
	}
	if rcv.maxInFlight <= 2*forwarder.StartConcurrency || rcv.maxInFlight > forwarder.DefaultWorkers {
		t.Errorf("at most %d calls at once, want more than %d (twice the start) and at most %d (the workers)",
			rcv.maxInFlight, 2*forwarder.StartConcurrency, forwarder.DefaultWorkers)
	}
	conntest.CheckPool(t, e.hookPool(rcv, &tr, forwarder.DefaultWorkers), rcv.maxGauge)
}

// A backlog of more than BacklogPending tickets is reported to
// Config.Backlog when the forwarder starts draining it and once it is
// delivered, and the draining gauge follows.
func TestBacklogIsReported(t *testing.T) {
	t.Parallel()
	const n = 3 * forwarder.BacklogPending / 2
	e := newEnv(t)
	rcv := newHookReceiver(t)
	tgs, closeTargets, err := targets.Open([]targets.Def{{Name: "hook", Kind: "webhook", Endpoint: rcv.srv.URL}}, t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeTargets() })
	e.createMany(t, "hook", n)
	waitFor(t, 30*time.Second, "the backlog published", func() bool {
		left, _, err := outbox.Backlog(t.Context(), e.db.Reader())
		return err == nil && left == 0
	})
	reports := make(chan bool, 4)
	cfg := testConfig()
	cfg.Workers = 0
	cfg.Backlog = func(on bool) { reports <- on }
	e.startForwarder(t, cfg, tgs...)
	next := func(want bool) {
		t.Helper()
		select {
		case on := <-reports:
			if on != want {
				t.Fatalf("Backlog(%v), want Backlog(%v)", on, want)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("no Backlog(%v) within 60s (%d keys at the receiver)", want, rcv.distinctKeys())
		}
		if got := testutil.ToFloat64(e.m.Draining); got != map[bool]float64{true: 1, false: 0}[want] {
			t.Errorf("draining gauge %v after Backlog(%v)", got, want)
		}
	}
	next(true)
	waitFor(t, 60*time.Second, "every ticket at the receiver", func() bool { return rcv.distinctKeys() == n })
	next(false)
	select {
	case on := <-reports:
		t.Errorf("Backlog(%v) after the backlog ended", on)
	default:
	}
}
