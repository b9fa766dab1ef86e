package ledger_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"ticketrelay/request"
)

// A dispatcher's entry says which targets it serves while it is renewed;
// Served is the union over the running ones, and find_request tells a
// request waiting for a target nobody serves, or for any dispatcher at all.
func TestPresence(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	if _, err := e.l.Create(ctx, newRequest("req-waits")); err != nil { // target "local"
		t.Fatal(err)
	}
	served := func() request.Served {
		t.Helper()
		s, err := e.l.Served(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	detail := func() string {
		t.Helper()
		st, err := e.find(ctx, "", "req-waits")
		if err != nil {
			t.Fatal(err)
		}
		return st.Detail
	}

	if s := served(); s.Dispatchers != 0 {
		t.Fatalf("Served before any announce = %+v", s)
	}
	if d := detail(); !strings.Contains(d, "No dispatcher is running") {
		t.Errorf("no dispatcher: detail %q", d)
	}

	hooks := e.l.NewPresence("d1", []string{"hook", "slack"}, "")
	if err := hooks.Announce(ctx); err != nil {
		t.Fatal(err)
	}
	if s := served(); s.Dispatchers != 1 || !s.Serves("hook") || !s.Serves("slack") || s.Serves("local") {
		t.Fatalf("Served = %+v, want d1's hook and slack", s)
	}
	if d := detail(); !strings.Contains(d, `No running dispatcher delivers to "local"`) || !strings.Contains(d, "same -config") {
		t.Errorf("local unserved: detail %q", d)
	}

	local := e.l.NewPresence("d2", []string{"local"}, "")
	if err := local.Announce(ctx); err != nil {
		t.Fatal(err)
	}
	if s := served(); s.Dispatchers != 2 || !s.Serves("local") || !s.Serves("hook") {
		t.Fatalf("Served = %+v, want the union of d1 and d2", s)
	}
	if d := detail(); strings.Contains(d, "dispatcher") {
		t.Errorf("local served: detail %q still speaks of dispatchers", d)
	}

	// d2 stops: its entry goes at once. d1 stops renewing: its entry stops
	// counting after PresenceFresh.
	if err := local.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if s := served(); s.Serves("local") {
		t.Fatalf("Served = %+v after d2 withdrew", s)
	}
	e.clock.Add(request.PresenceFresh + time.Second)
	if s := served(); s.Dispatchers != 0 {
		t.Fatalf("Served = %+v after d1 missed its renewals", s)
	}
	// Renewing brings it back.
	if err := hooks.Announce(ctx); err != nil {
		t.Fatal(err)
	}
	if s := served(); s.Dispatchers != 1 {
		t.Fatalf("Served = %+v after d1 renewed", s)
	}
}

// A running dispatcher that cannot reach the stream notes it, and
// find_request says delivery is blocked, since when and why, until the note
// is cleared, the dispatcher withdraws, or its entry goes stale.
func TestPresenceBlockedDelivery(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	if _, err := e.l.Create(ctx, newRequest("req-blocked")); err != nil {
		t.Fatal(err)
	}
	detail := func() string {
		t.Helper()
		st, err := e.find(ctx, "", "req-blocked")
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != request.StatusQueued {
			t.Fatalf("status %s, want queued", st.Status)
		}
		return st.Detail
	}
	p := e.l.NewPresence("d1", []string{"local"}, "")
	if err := p.Announce(ctx); err != nil {
		t.Fatal(err)
	}
	if d := detail(); strings.Contains(d, "blocked") {
		t.Fatalf("detail %q speaks of a block before any", d)
	}
	since := e.clock.Now().Add(-3 * time.Second)
	if err := p.Blocked(ctx, since, "natsjs: stream TICKETS: not connected"); err != nil {
		t.Fatal(err)
	}
	if d := detail(); !contains(d, "Delivery is blocked", since.UTC().Format(time.RFC3339), "not connected", "Do not create it again") {
		t.Fatalf("blocked: detail %q", d)
	}
	if err := p.Unblocked(ctx); err != nil {
		t.Fatal(err)
	}
	if d := detail(); strings.Contains(d, "blocked") {
		t.Fatalf("detail %q after Unblocked", d)
	}
	if err := p.Blocked(ctx, since, "again"); err != nil {
		t.Fatal(err)
	}
	if err := p.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Announce(ctx); err != nil {
		t.Fatal(err)
	}
	if d := detail(); strings.Contains(d, "blocked") {
		t.Fatalf("detail %q: Withdraw left the note", d)
	}
	if err := p.Blocked(ctx, since, "stale"); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(request.PresenceFresh + time.Second)
	if d := detail(); strings.Contains(d, "Delivery is blocked") {
		t.Fatalf("detail %q: a stale dispatcher's note still counts", d)
	}
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
