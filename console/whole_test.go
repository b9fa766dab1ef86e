package console_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/console"
	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/webhook"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/delivery/natsjs"
	"ticketrelay/internal/archetype"
	"ticketrelay/internal/backoff"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/ledger"
	"ticketrelay/store/outbox"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/store/trail"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/fixture"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

func openLedger(t *testing.T) *ledger.Ledger {
	t.Helper()
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "tickets.db"))
	if err != nil {
		t.Fatal(err)
	}
	w := sqlitedb.NewWriter(db, slog.New(slog.DiscardHandler), metrics.NewDispatcher(prometheus.NewRegistry()).Writer)
	t.Cleanup(func() { w.Close(); db.Close() })
	return ledger.New(db, w, time.Now)
}

// Host b's console over a real JetStream: host a's request is listed as
// current while the copy follows the stream; once the server is gone the
// list says it may be out of date (never current), and the request's page
// says the cluster record did not answer and shows the copy.
func TestConsoleSaysWhenTheCopyIsStale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	ns, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: filepath.Join(t.TempDir(), "nats")}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	js := e2eproc.JetStream(t, ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	open := func(host string) *clusterrec.Store {
		s, err := clusterrec.Open(ctx, archetype.Archetype{Logger: log}, js, clusterrec.Config{Installation: "test", Host: host, Replicas: 1, OpTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sa, sb := open("host-a"), open("host-b")
	if _, err := trail.EnsureStream(ctx, js, "test", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	la, lb := openLedger(t), openLedger(t)
	if err := sa.PublishConsole(ctx, "https://a.example.net:9470"); err != nil {
		t.Fatal(err)
	}
	req := ticket.Request{RequestID: "stale-1", Tool: "create_ticket", Target: "hook", Title: "Seen through the copy", Priority: "high"}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := clusterrec.NewFront(archetype.Archetype{Logger: log}, sa, la).Create(ctx, req); err != nil {
		t.Fatal(err)
	}

	cp := clusterrec.NewCopy(sb, js, lb, log, time.Now)
	go cp.Run(ctx, clusterrec.CopyConfig{Wait: 100 * time.Millisecond})
	c, err := console.New(console.Config{Store: lb, Log: log, Loopback: true, Whole: &console.Whole{Host: "host-b", Copy: lb, State: cp.State,
		ConsoleOf: sb.ConsoleOf, Record: recordOf(sb)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, c)
	get := func(path string) (int, string) {
		res, err := http.Get(srv + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, html.UnescapeString(string(b))
	}
	id := ticket.ScopedID("", "stale-1")
	var list string
	if !testwait.Until(20*time.Second, func() bool {
		_, list = get("/requests")
		return strings.Contains(list, `data-id="`+id+`"`) && strings.Contains(list, "current as of")
	}) {
		t.Fatalf("host b's list does not show host a's request as current:\n%s", list)
	}
	// The overview counts every host's requests: b's ledger holds none.
	if _, overview := get("/"); waitingOf(overview, "hook") != "1" || !strings.Contains(overview, "Every host's requests") {
		t.Fatalf("host b's overview does not count host a's waiting request:\n%s", overview)
	}
	code, page := get("/request?id=" + url.QueryEscape(id))
	if code != http.StatusOK || !strings.Contains(page, "held by host host-a: act on its console, https://a.example.net:9470") || strings.Contains(page, `id="stale"`) {
		t.Fatalf("host b's page of a's request while the record answers: %d\n%s", code, page)
	}

	ns.Shutdown()
	ns.WaitForShutdown()
	if !testwait.Until(clusterrec.StaleAfter+20*time.Second, func() bool {
		_, list = get("/requests")
		return strings.Contains(list, "This list may be out of date")
	}) {
		t.Fatalf("with the server gone the list does not say it may be out of date:\n%s", list)
	}
	if strings.Contains(list, "current as of") || !strings.Contains(list, `data-id="`+id+`"`) {
		t.Fatalf("with the server gone the list calls itself current, or lost the copy:\n%s", list)
	}
	if _, overview := get("/"); !strings.Contains(overview, "These counts may be out of date") || waitingOf(overview, "hook") != "1" {
		t.Fatalf("with the server gone the overview does not say its counts may be out of date:\n%s", overview)
	}
	code, page = get("/request?id=" + url.QueryEscape(id))
	if code != http.StatusOK || !strings.Contains(page, "The cluster record did not answer") || !strings.Contains(page, `id="holder">host-a`) {
		t.Fatalf("with the server gone the request's page: %d\n%s", code, page)
	}
}

// waitingOf is the waiting count the overview shows for target; "" if
// it shows none.
func waitingOf(overview, target string) string {
	m := regexp.MustCompile(`(?s)data-target="` + regexp.QuoteMeta(target) + `">.*?status=waiting&target=` + regexp.QuoteMeta(target) + `">(\d+)</a>`).FindStringSubmatch(overview)
	if m == nil {
		return ""
	}
	return m[1]
}

// recordOf is console.Whole.Record on s, as the dispatcher wires it.
func recordOf(s *clusterrec.Store) func(ctx context.Context, id string) (request.Report, ticket.Ticket, string, bool, error) {
	return func(ctx context.Context, id string) (request.Report, ticket.Ticket, string, bool, error) {
		st, rec, found, err := s.Report(ctx, id)
		return st, rec.Ticket, rec.Host, found, err
	}
}

func newTestServer(t *testing.T, c *console.Console) string {
	t.Helper()
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// Host a's console shows the calls host b's forwarder made for a request
// host a accepted as it shows its own: each with its time, HTTP status,
// error class, latency and host b's name. The downstream is a webhook
// receiver answering 503, then 201, each after a delay the page's
// latencies must include.
func TestConsoleShowsAnotherHostsCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	n := fixture.StartNATSWithStream(t, natsjs.StreamConfig{})
	open := func(host string) *clusterrec.Store {
		s, err := clusterrec.Open(ctx, archetype.Archetype{Logger: log}, n.JS, clusterrec.Config{Installation: "test", Host: host, Replicas: 1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sa, sb := open("host-a"), open("host-b")
	if _, err := trail.EnsureStream(ctx, n.JS, "test", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	la, lb := fixture.NewLedger(t), fixture.NewLedger(t)

	const slow503, slow201 = 60 * time.Millisecond, 30 * time.Millisecond
	// The bucket keeps a record's last write only: the second call waits
	// until host a's page showed the first, so that the copy cannot miss it.
	var calls atomic.Int32
	firstShown := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			time.Sleep(slow503)
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		select {
		case <-firstShown:
		case <-r.Context().Done():
			return
		}
		time.Sleep(slow201)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"T-77"}`)
	}))
	t.Cleanup(hook.Close)
	target, err := webhook.New(webhook.Config{Name: "hook", URL: hook.URL})
	if err != nil {
		t.Fatal(err)
	}

	// Host a accepts the request and its relay publishes it; only host b
	// runs a forwarder.
	req := ticket.Request{RequestID: "calls-1", Tool: "create_ticket", Target: "hook", Title: "Called from b", Priority: "high"}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := clusterrec.NewFront(archetype.Archetype{Logger: log}, sa, la.Ledger).Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	m := metrics.NewDispatcher(prometheus.NewRegistry())
	relay, err := outbox.NewRelay(archetype.Archetype{Logger: log, Metrics: m}, outbox.RelayConfig{Holder: "host-a", PollInterval: 5 * time.Millisecond},
		la.DB.Reader(), la.Writer, natsjs.NewPublisher(n.JS))
	if err != nil {
		t.Fatal(err)
	}
	fwd := forwarder.New(archetype.Archetype{Logger: log, Metrics: m}, forwarder.Config{Workers: 1, DeliveryTimeout: 10 * time.Second,
		Retry: backoff.Policy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}, Host: "box-b"},
		n.JS, clusterrec.NewDeliveries(sb, lb.Ledger, time.Now), []downstream.Target{target})
	cp := clusterrec.NewCopy(sa, n.JS, la.Ledger, log, time.Now)
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{relay.Run, fwd.Run,
		func(ctx context.Context) error {
			return cp.Run(ctx, clusterrec.CopyConfig{Wait: 100 * time.Millisecond})
		}} {
		wg.Go(func() { _ = run(rctx) })
	}
	t.Cleanup(func() { stop(); wg.Wait() })

	c, err := console.New(console.Config{Store: la.Ledger, Log: log, Loopback: true, Whole: &console.Whole{Host: "host-a", Copy: la.Ledger, State: cp.State,
		ConsoleOf: sa.ConsoleOf, Record: recordOf(sa)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, c)
	id := ticket.ScopedID("", "calls-1")
	var page string
	timeline := regexp.MustCompile(`(?s)id="attempts">(.*?)</ol>`)
	shows := func(outcome string) bool {
		res, err := http.Get(srv + "/request?id=" + url.QueryEscape(id))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		page = html.UnescapeString(string(b))
		tl := timeline.FindStringSubmatch(page)
		return res.StatusCode == http.StatusOK && tl != nil && strings.Contains(tl[1], outcome+"</span>")
	}
	if !testwait.Until(30*time.Second, func() bool { return shows("retrying") }) {
		t.Fatalf("host a's page never shows host b's first call:\n%s", page)
	}
	close(firstShown)
	if !testwait.Until(30*time.Second, func() bool { return shows("delivered") }) {
		t.Fatalf("host a's page never shows host b's delivery:\n%s", page)
	}
	if calls.Load() != 2 {
		t.Fatalf("the downstream was called %d times, want 2", calls.Load())
	}
	tl := timeline.FindStringSubmatch(page)
	if tl == nil {
		t.Fatalf("no attempts timeline on the page:\n%s", page)
	}
	row := regexp.MustCompile(`<li class="(\w+)"><b>[^<]+</b> attempt (\d) on ([\w-]+): <span class="status \w+">\w+</span>, HTTP (\S+?)(?:, (\w+))?, ([0-9.]+m?s)`)
	rows := row.FindAllStringSubmatch(tl[1], -1)
	if len(rows) != 2 {
		t.Fatalf("the timeline shows %d calls with an HTTP status and a latency, want 2:\n%s", len(rows), tl[1])
	}
	for i, want := range []struct {
		outcome, status, class string
		slow                   time.Duration
	}{{"retrying", "503", "transient", slow503}, {"delivered", "—", "", slow201}} {
		r := rows[i]
		took, err := time.ParseDuration(r[6])
		if err != nil {
			t.Fatal(err)
		}
		if r[1] != want.outcome || r[2] != fmt.Sprint(i+1) || r[3] != "host-b" || r[4] != want.status || r[5] != want.class || took < want.slow {
			t.Errorf("call %d on the timeline: %q; want %s on host-b, HTTP %s %s, at least %v", i+1, r[0], want.outcome, want.status, want.class, want.slow)
		}
	}
}
