package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// ticketOf is a normalized create request of subject on target.
func ticketOf(t *testing.T, subject, id, target, title, body string, labels ...string) ticket.Request {
	t.Helper()
	r := ticket.Request{RequestID: id, Subject: subject, Tool: "create_" + target, Target: target,
		Title: title, Body: body, Priority: "normal", Labels: labels}
	if err := r.Normalize(); err != nil {
		t.Fatal(err)
	}
	return r
}

func mustCreate(t *testing.T, e *env, reqs ...ticket.Request) {
	t.Helper()
	for _, r := range reqs {
		if _, err := e.l.Create(context.Background(), r); err != nil {
			t.Fatalf("Create(%s): %v", r.RequestID, err)
		}
	}
}

var everyone = request.SearchScope{All: true}

func search(t *testing.T, e *env, s request.Search) request.SearchPage {
	t.Helper()
	if s.Limit == 0 {
		s.Limit = 10
	}
	p, err := e.l.SearchTickets(context.Background(), s)
	if err != nil {
		t.Fatalf("SearchTickets(%+v): %v", s, err)
	}
	return p
}

func ids(p request.SearchPage) []string {
	out := make([]string, len(p.Hits))
	for i, h := range p.Hits {
		out[i] = h.Report.RequestID
	}
	return out
}

func TestSearchRanksTitleMatchesFirst(t *testing.T) {
	e := openEnv(t, dbPath(t))
	mustCreate(t, e,
		ticketOf(t, "", "body-only", "local", "Slow page", "the checkout service returns 500 sometimes"),
		ticketOf(t, "", "title", "local", "Checkout returns 500", "seen on every run"),
		ticketOf(t, "", "label", "local", "Payment errors", "500 on pay", "checkout"),
		ticketOf(t, "", "unrelated", "local", "Disk full", "df shows 100%"),
	)
	p := search(t, e, request.Search{Text: "checkout 500", Scope: everyone})
	if got := ids(p); fmt.Sprint(got) != "[title label body-only]" {
		t.Fatalf("ranking = %v, want [title label body-only]", got)
	}
	h := p.Hits[0]
	if h.Title != "Checkout returns 500" || h.Report.Status != request.StatusQueued || h.Report.Target != "local" ||
		h.Report.TicketID != ticket.IDFor("title") || h.Report.AcceptedAt == nil || p.More {
		t.Fatalf("first hit = %+v (more %v)", h, p.More)
	}
	if b := p.Hits[2].Snippet; b != "the [checkout] service returns [500] sometimes" {
		t.Errorf("snippet = %q", b)
	}
}

// The query's text is words, never FTS5 syntax: operators, quotes,
// column filters and stars match as the words they hold, and text
// without words is refused before the database is asked.
func TestSearchTextIsNeverSyntax(t *testing.T) {
	e := openEnv(t, dbPath(t))
	mustCreate(t, e,
		ticketOf(t, "", "a", "local", `He said "NOT OR" title:x`, "near(a b) body*"),
		ticketOf(t, "", "b", "local", "Other ticket", "nothing"),
	)
	for _, q := range []string{`"NOT`, `NOT OR`, `title:x`, `near(a b)`, `body*`, `said) OR (other`, `OR`, `x" OR "b`} {
		p, err := e.l.SearchTickets(context.Background(), request.Search{Text: q, Scope: everyone, Limit: 10})
		if err != nil {
			t.Errorf("query %q: %v", q, err)
			continue
		}
		if q == `said) OR (other` {
			if len(p.Hits) != 0 {
				t.Errorf("query %q matched %v: OR must be a word, all words required", q, ids(p))
			}
			continue
		}
		if fmt.Sprint(ids(p)) != "[a]" {
			t.Errorf("query %q = %v, want [a]", q, ids(p))
		}
	}
	for _, q := range []string{"", `"*():^`, string(make([]byte, request.MaxSearchQueryLen+1))} {
		_, err := e.l.SearchTickets(context.Background(), request.Search{Text: q, Scope: everyone, Limit: 10})
		var se *request.SearchError
		if !errors.As(err, &se) || se.Argument != "query" {
			t.Errorf("query %q: error %v, want a SearchError about the query", q, err)
		}
	}
}

func TestSearchPages(t *testing.T) {
	e := openEnv(t, dbPath(t))
	for i := range 7 {
		mustCreate(t, e, ticketOf(t, "", fmt.Sprintf("r%d", i), "local", "Export failed", fmt.Sprintf("run %d", i)))
		e.clock.Add(time.Second)
	}
	var seen []string
	for off := 0; ; off += 3 {
		p := search(t, e, request.Search{Text: "export", Scope: everyone, Limit: 3, Offset: off})
		seen = append(seen, ids(p)...)
		if !p.More {
			break
		}
		if off > 10 {
			t.Fatal("More never turns false")
		}
	}
	// Equal scores: newest first.
	if fmt.Sprint(seen) != "[r6 r5 r4 r3 r2 r1 r0]" {
		t.Fatalf("pages = %v", seen)
	}
	for _, s := range []request.Search{{Text: "x", Limit: 0}, {Text: "x", Limit: request.MaxSearchLimit + 1}, {Text: "x", Limit: 1, Offset: request.MaxSearchDepth}, {Text: "x", Limit: 1, Status: "open"}} {
		var se *request.SearchError
		if _, err := e.l.SearchTickets(context.Background(), s); !errors.As(err, &se) {
			t.Errorf("%+v: error %v, want a SearchError", s, err)
		}
	}
}

// A caller finds its own tickets and those of the targets it may file to,
// not the others'.
func TestSearchScope(t *testing.T) {
	e := openEnv(t, dbPath(t))
	mustCreate(t, e,
		ticketOf(t, "alice", "a1", "github", "Login broken", "x"),
		ticketOf(t, "bob", "b1", "github", "Login broken too", "x"),
		ticketOf(t, "bob", "b2", "jira", "Login broken in jira", "x"),
		ticketOf(t, "carol", "c1", "jira", "Login broken for carol", "x"),
	)
	cases := []struct {
		scope request.SearchScope
		want  string
	}{
		{request.SearchScope{Subject: "alice"}, "[a1]"},
		{request.SearchScope{Subject: "alice", Targets: []string{"github"}}, "[a1 b1]"},
		{request.SearchScope{Subject: "bob", Targets: []string{"github"}}, "[a1 b1 b2]"},
		{request.SearchScope{Subject: "dave", Targets: []string{`"jira"`}}, "[]"},
		{everyone, "[a1 b1 b2 c1]"},
	}
	for _, c := range cases {
		p := search(t, e, request.Search{Text: "login", Scope: c.scope})
		got := ids(p)
		slices.Sort(got)
		if fmt.Sprint(got) != c.want {
			t.Errorf("scope %+v: %v, want %s", c.scope, got, c.want)
		}
	}
	// Bob's request id is shown as he gave it, under his subject.
	p := search(t, e, request.Search{Text: "jira", Scope: request.SearchScope{Subject: "bob"}})
	if len(p.Hits) != 1 || p.Hits[0].Report.RequestID != "b2" || p.Hits[0].Subject != "bob" {
		t.Fatalf("bob's jira ticket = %+v", p.Hits)
	}
}

func TestSearchByStatusAndTarget(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	mustCreate(t, e,
		ticketOf(t, "", "done", "local", "Queue stuck", "x"),
		ticketOf(t, "", "waiting", "local", "Queue stuck again", "x"),
		ticketOf(t, "", "elsewhere", "other", "Queue stuck there", "x"),
	)
	if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: "done", Target: "local", State: string(request.StatusDelivered),
		Attempts: 1, ExternalID: "42", ExternalURL: "https://tracker.example/42", UpdatedAt: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	p := search(t, e, request.Search{Text: "queue", Scope: everyone, Status: request.SearchDelivered})
	if len(p.Hits) != 1 || p.Hits[0].Report.ExternalURL != "https://tracker.example/42" || p.Hits[0].Report.Status != request.StatusDelivered {
		t.Fatalf("delivered = %+v", p.Hits)
	}
	if got := ids(search(t, e, request.Search{Text: "queue", Scope: everyone, Status: request.SearchPending})); fmt.Sprint(got) != "[waiting elsewhere]" &&
		fmt.Sprint(got) != "[elsewhere waiting]" {
		t.Errorf("pending = %v", got)
	}
	if got := ids(search(t, e, request.Search{Text: "queue", Scope: everyone, Target: "other"})); fmt.Sprint(got) != "[elsewhere]" {
		t.Errorf("target other = %v", got)
	}
}

// The index follows the ledger rows: a pruned ticket is no longer found,
// and the index stays consistent with its content.
func TestSearchForgetsPrunedTickets(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	mustCreate(t, e, ticketOf(t, "", "old", "local", "Backup failed", "x"))
	if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: "old", Target: "local", State: string(request.StatusDelivered),
		Attempts: 1, UpdatedAt: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Hour)
	mustCreate(t, e, ticketOf(t, "", "new", "local", "Backup failed again", "x"))
	if n, err := e.l.Prune(ctx, e.clock.Now().Add(-time.Minute), 10); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v", n, err)
	}
	if got := ids(search(t, e, request.Search{Text: "backup", Scope: everyone})); fmt.Sprint(got) != "[new]" {
		t.Fatalf("after prune = %v", got)
	}
	if _, err := fixture.Raw(t, e.path).Exec(`INSERT INTO tickets_fts (tickets_fts, rank) VALUES ('integrity-check', 1)`); err != nil {
		t.Fatalf("index integrity: %v", err)
	}
}

// A ledger written by the previous version has its tickets indexed by the
// migration that adds the index.
func TestMigrationIndexesExistingTickets(t *testing.T) {
	path := dbPath(t)
	n := ledger.SearchVersionForTest
	old := atSchema(t, path, n-1)
	insertPublished(t, old, 5, ticketOf(t, "", "before", "local", "Certificate expired on api", "renew it"), "tkt_before")
	insertPublished(t, old, 6, ticketOf(t, "", "other", "local", "Unrelated", "nothing"), "tkt_other")
	old.Close()

	e := openEnv(t, path)
	if got := userVersion(t, path); got < n {
		t.Fatalf("user_version = %d, want at least %d", got, n)
	}
	p := search(t, e, request.Search{Text: "certificate", Scope: everyone})
	if len(p.Hits) != 1 || p.Hits[0].Report.RequestID != "before" || p.Hits[0].Report.Status != request.StatusPublished {
		t.Fatalf("after upgrade = %+v", p.Hits)
	}
	mustCreate(t, e, ticketOf(t, "", "after", "local", "Certificate expired on web", "x"))
	if got := ids(search(t, e, request.Search{Text: "certificate expired", Scope: everyone})); len(got) != 2 {
		t.Fatalf("after a new create = %v", got)
	}
}

func TestSearchSnippet(t *testing.T) {
	long := "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"
	cases := []struct{ text, want string }{
		{"the checkout\nservice returns 500", "the [checkout] service returns [500]"},
		{long, "…six seven eight nine [ten] eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"},
		{"Ten, then TEN again", "[Ten], then [TEN] again"},
		{"nothing here", ""},
	}
	for _, c := range cases {
		if got := ledger.SnippetForTest(c.text, []string{"checkout", "500", "ten"}); got != c.want {
			t.Errorf("snippet(%q) = %q, want %q", c.text, got, c.want)
		}
	}
	got := ledger.SnippetForTest(long+" "+long, []string{"three"})
	if got != "one two [three] four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen…" {
		t.Errorf("snippet at the start = %q", got)
	}
}
