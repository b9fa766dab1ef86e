package console_test

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/console"
	"ticketrelay/delivery/natsjs"
	"ticketrelay/internal/archetype"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/ledger"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/store/trail"
	"ticketrelay/testkit/e2eproc"
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
		ConsoleOf: sb.ConsoleOf, Record: func(ctx context.Context, id string) (request.Report, ticket.Ticket, string, bool, error) {
			st, rec, found, err := sb.Report(ctx, id)
			return st, rec.Ticket, rec.Host, found, err
		}}})
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

func newTestServer(t *testing.T, c *console.Console) string {
	t.Helper()
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}
