package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/front/mcptools"
	"ticketrelay/request"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

func TestFindUnknown(t *testing.T) {
	e := openEnv(t, dbPath(t))
	st, err := e.find(context.Background(), "", "never-seen")
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != request.StatusUnknown || st.RequestID != "never-seen" || st.TicketID != "" || st.AcceptedAt != nil {
		t.Fatalf("Find(unknown) = %+v", st)
	}
	// True while a first call is still being stored and after retention,
	// and naming no tool (tools are named by configuration).
	for _, want := range []string{"has been stored", "still being stored", "forgotten after its retention",
		"SAME request_id and arguments is always safe", "do not use a new request_id"} {
		if !strings.Contains(st.Detail, want) {
			t.Errorf("Detail = %q, lacks %q", st.Detail, want)
		}
	}
	for _, bad := range []string{"create_ticket", "was accepted", "safe to call"} {
		if strings.Contains(st.Detail, bad) {
			t.Errorf("Detail = %q, says %q", st.Detail, bad)
		}
	}
}

func TestFindFollowsTheRequest(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	db := fixture.Raw(t, e.path)
	accepted := e.clock.Now()
	res, err := e.l.Create(ctx, newRequest("req-life"))
	if err != nil {
		t.Fatal(err)
	}

	find := func() mcptools.RequestStatus {
		t.Helper()
		st, err := e.find(ctx, "", "req-life")
		if err != nil {
			t.Fatal(err)
		}
		if st.TicketID != res.TicketID || st.Tool != "create_ticket" || st.Target != "local" ||
			st.AcceptedAt == nil || !st.AcceptedAt.Equal(accepted) {
			t.Fatalf("Find identity fields = %+v", st)
		}
		return st
	}

	st := find()
	if st.Status != request.StatusQueued || st.PublishedAt != nil || st.UpdatedAt != nil || st.Attempts != 0 {
		t.Fatalf("after Create: %+v, want queued", st)
	}
	if !strings.Contains(st.Detail, "Do not create it again") {
		t.Errorf("queued Detail = %q", st.Detail)
	}

	published := accepted.Add(40 * time.Millisecond)
	if _, err := db.Exec(`UPDATE outbox SET published_at = ? WHERE request_id = ?`, published.UnixNano(), "req-life"); err != nil {
		t.Fatal(err)
	}
	st = find()
	if st.Status != request.StatusPublished || st.InProgress || st.PublishedAt == nil || !st.PublishedAt.Equal(published) {
		t.Fatalf("after publish: %+v, want published at %v", st, published)
	}
	if !strings.Contains(st.Detail, "queued for delivery to local") {
		t.Errorf("published Detail = %q", st.Detail)
	}

	var version int64 // of the record, as the forwarder would track it
	record := func(d request.Delivery) time.Time {
		t.Helper()
		e.clock.Add(time.Second)
		d.RequestID, d.Target, d.Version = "req-life", "local", version
		if err := e.l.RecordDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
		version++
		return e.clock.Now()
	}

	at := record(request.Delivery{State: request.DeliveryAttempting, Attempts: 1})
	st = find()
	if st.Status != request.StatusPublished || !st.InProgress || st.Attempts != 1 || st.UpdatedAt == nil || !st.UpdatedAt.Equal(at) {
		t.Fatalf("attempting: %+v, want published and in progress", st)
	}
	if st.PublishedAt == nil || !st.PublishedAt.Equal(published) {
		t.Errorf("attempting: PublishedAt = %v, want %v", st.PublishedAt, published)
	}
	if !strings.Contains(st.Detail, "attempt 1 to local is in progress") {
		t.Errorf("attempting Detail = %q", st.Detail)
	}

	// An attempt that ended without a known outcome and waits to look it up
	// before any resend is not in progress: it is retrying.
	lookupAt := e.clock.Now().Add(10 * time.Second)
	record(request.Delivery{State: request.DeliveryAttempting, Attempts: 1, NextAttemptAt: lookupAt, LastError: "lookup failed: HTTP 502"})
	st = find()
	if st.Status != request.StatusRetrying || st.InProgress || st.NextAttemptAt == nil || !st.NextAttemptAt.Equal(lookupAt) {
		t.Fatalf("attempting, waiting for its lookup: %+v, want retrying, not in progress", st)
	}
	if !strings.Contains(st.Detail, "lookup failed: HTTP 502") || !strings.Contains(st.Detail, "retried automatically") {
		t.Errorf("attempting, waiting for its lookup: Detail = %q", st.Detail)
	}

	next := e.clock.Now().Add(30 * time.Second)
	at = record(request.Delivery{State: string(request.StatusRetrying), Attempts: 1, NextAttemptAt: next, LastError: "HTTP 503: busy"})
	st = find()
	if st.Status != request.StatusRetrying || st.InProgress || st.Attempts != 1 || st.LastError != "HTTP 503: busy" ||
		st.NextAttemptAt == nil || !st.NextAttemptAt.Equal(next) || !st.UpdatedAt.Equal(at) {
		t.Fatalf("retrying: %+v", st)
	}
	if !strings.Contains(st.Detail, "Attempt 1 to local failed (HTTP 503: busy)") {
		t.Errorf("retrying Detail = %q", st.Detail)
	}
	d, ok, err := e.l.Delivery(ctx, "req-life")
	if err != nil || !ok || d.Settled() || d.State != "retrying" || !d.NextAttemptAt.Equal(next) {
		t.Fatalf("Delivery = %+v %v %v", d, ok, err)
	}

	record(request.Delivery{State: string(request.StatusDelivered), Attempts: 2, ExternalID: "line-7", ExternalURL: "file:///tmp/t.jsonl#L7"})
	st = find()
	if st.Status != request.StatusDelivered || st.ExternalID != "line-7" || st.ExternalURL != "file:///tmp/t.jsonl#L7" ||
		st.Attempts != 2 || st.NextAttemptAt != nil || st.LastError != "" || st.InProgress {
		t.Fatalf("delivered: %+v (next attempt and last error must be cleared)", st)
	}
	if st.Detail != "Delivered to local as line-7." {
		t.Errorf("delivered Detail = %q", st.Detail)
	}
	if d, _, _ := e.l.Delivery(ctx, "req-life"); !d.Settled() {
		t.Errorf("delivered is not Settled")
	}
}

func TestFindTerminalStates(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	for _, tc := range []struct {
		state   request.Status
		failure request.Failure // as the forwarder records it
		detail  string
	}{
		{request.StatusFailed, request.FailureRejected, "local rejected it (permanent error (HTTP 422): title too long)"},
		{request.StatusUncertain, request.FailureUnknown, "Check local for ticket "},
	} {
		id := "req-" + string(tc.state)
		res, err := e.l.Create(ctx, newRequest(id))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: "local", State: string(tc.state),
			Attempts: 3, LastError: "permanent error (HTTP 422): title too long", Failure: tc.failure}); err != nil {
			t.Fatal(err)
		}
		st, err := e.find(ctx, "", id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != tc.state || st.Attempts != 3 || st.InProgress || st.PublishedAt != nil {
			t.Errorf("%s: Find = %+v", tc.state, st)
		}
		if !strings.Contains(st.Detail, tc.detail) {
			t.Errorf("%s: Detail = %q, want %q", tc.state, st.Detail, tc.detail)
		}
		if tc.state == request.StatusUncertain && !strings.Contains(st.Detail, res.TicketID) {
			t.Errorf("uncertain Detail %q does not name ticket %s", st.Detail, res.TicketID)
		}
		if d, ok, _ := e.l.Delivery(ctx, id); !ok || !d.Settled() {
			t.Errorf("%s: Delivery %+v not settled", tc.state, d)
		}
	}
}

// TestFindSettledDetails: a failed or uncertain request's detail says what
// happened (from the last error) and the next step: an operator's command,
// a NEW request_id only where the downstream cannot hold the ticket (or an
// operator found it does not), and never "permanently" of attempts that may
// have reached the downstream.
func TestFindSettledDetails(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	const newID = "create it with a NEW request_id"
	const noNewID = "not create it again with a new request_id"
	for i, tc := range []struct {
		state     request.Status
		failure   request.Failure // as the forwarder (or an operator's resolve) records it
		lastError string
		want      []string // with %s for the request id
		not       []string
	}{
		{request.StatusFailed, request.FailureRejected, "permanent error (HTTP 400): field 'title' is too long",
			[]string{"rejected it (permanent error (HTTP 400): field 'title' is too long)", "fix the arguments and " + newID,
				"`dispatcher redrive -data DIR %s`", "same dedupe key"},
			[]string{"permanently"}},
		{request.StatusFailed, request.FailureAuth, "auth error (HTTP 401): invalid token",
			[]string{"refused ticketrelay's credentials (auth error (HTTP 401): invalid token)", "`dispatcher redrive -data DIR %s`",
				"same dedupe key", "Do " + noNewID},
			[]string{"permanently", "fix the arguments", newID}},
		{request.StatusFailed, request.FailureExhausted, "10 attempts exhausted; last error: transient error (HTTP 503): unavailable",
			[]string{"(10 attempts exhausted; last error: transient error (HTTP 503): unavailable)", "may hold the ticket",
				"do " + noNewID, "`dispatcher redrive -data DIR %s`", "same dedupe key"},
			[]string{"permanently", "fix the arguments", newID}},
		{request.StatusFailed, request.FailurePermanent, "permanent error: encoding the request: json: unsupported value",
			[]string{"(permanent error: encoding the request: json: unsupported value)", "`dispatcher redrive -data DIR %s`",
				"Do " + noNewID, "may hold it"},
			[]string{"permanently", "fix the arguments", newID}},
		{request.StatusFailed, request.FailureSettled, "settled as not delivered by an operator",
			[]string{"settled this request as not delivered", newID, "`dispatcher redrive -data DIR %s`", "not both"},
			[]string{"permanently"}},
		{request.StatusUncertain, request.FailureUnknown, "attempt 1 may have created the item (transient error (HTTP 503): unavailable) and local has no consistent lookup",
			[]string{"outcome of an attempt to deliver to local is unknown (attempt 1 may have created the item (transient error (HTTP 503)",
				"Check local for ticket ", "`dispatcher resolve -data DIR %s -delivered EXTERNAL_ID`",
				"If it is not, " + newID, "only repeats this answer", "`dispatcher resolve -data DIR %s -failed`"},
			[]string{"ended without an answer", "permanently"}},
		{request.StatusUncertain, request.FailureUnknown, "attempt 2 ended without an answer and local has no consistent lookup",
			[]string{"is unknown (attempt 2 ended without an answer", "`dispatcher resolve -data DIR %s -delivered EXTERNAL_ID`",
				"If it is not, " + newID, "`dispatcher resolve -data DIR %s -failed`"},
			[]string{"permanently"}},
	} {
		id := fmt.Sprintf("req-settled-%d", i)
		if _, err := e.l.Create(ctx, newRequest(id)); err != nil {
			t.Fatal(err)
		}
		if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: "local", State: string(tc.state),
			Attempts: 10, LastError: tc.lastError, Failure: tc.failure}); err != nil {
			t.Fatal(err)
		}
		st, err := e.find(ctx, "", id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != tc.state || st.LastError != tc.lastError {
			t.Fatalf("%s: Find = %+v", id, st)
		}
		for _, w := range tc.want {
			if strings.Contains(w, "%s") {
				w = fmt.Sprintf(w, id)
			}
			if !strings.Contains(st.Detail, w) {
				t.Errorf("%s %s after %q: Detail = %q, lacks %q", id, tc.state, tc.lastError, st.Detail, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(st.Detail, n) {
				t.Errorf("%s %s after %q: Detail = %q, says %q", id, tc.state, tc.lastError, st.Detail, n)
			}
		}
	}
}

// PriorDelivery answers the forwarder's three cases in one query: a request
// the ledger does not hold, one with no delivery record yet, one with a
// record; and it reads the ticket, which the outbox message only names.
func TestPriorDelivery(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	check := func(id string, wantFound, wantAccepted bool) request.Prior {
		t.Helper()
		p, err := e.l.PriorDelivery(ctx, id)
		if err != nil || p.Found != wantFound || p.Accepted != wantAccepted || p.Delivery.RequestID != id {
			t.Fatalf("PriorDelivery(%s) = %+v, %v; want found %v accepted %v", id, p, err, wantFound, wantAccepted)
		}
		return p
	}
	check("never-seen", false, false)
	for _, req := range []ticket.Request{newRequest("req-new"), {RequestID: "req-bare", Tool: "create_ticket", Target: "local", Title: "t"}} {
		if err := req.Normalize(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.l.Create(ctx, req); err != nil {
			t.Fatal(err)
		}
		p := check(req.RequestID, false, true)
		if d := p.Delivery; d.State != "" || d.Attempts != 0 {
			t.Fatalf("no record yet, got %+v", d)
		}
		want := ticket.Ticket{Request: req, ID: ticket.IDFor(req.RequestID), CreatedAt: e.clock.Now().UTC()}
		got := p.Ticket
		if len(got.Labels) == 0 && len(want.Labels) == 0 {
			got.Labels = want.Labels // nil or empty: the same ticket
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ticket read back as %+v, accepted %+v", p.Ticket, want)
		}
		// The message names the ticket; it does not carry it.
		var payload string
		if err := fixture.Raw(t, e.path).QueryRow(`SELECT payload FROM outbox WHERE request_id = ?`, req.RequestID).Scan(&payload); err != nil {
			t.Fatal(err)
		}
		if wantPayload := `{"request_id":"` + req.RequestID + `","ticket_id":"` + want.ID + `"}`; payload != wantPayload {
			t.Fatalf("outbox payload %s, want %s", payload, wantPayload)
		}
	}
	next := e.clock.Now().Add(time.Minute)
	rec := request.Delivery{RequestID: "req-new", Target: "local", State: string(request.StatusRetrying), Attempts: 3,
		NextAttemptAt: next, LastError: "HTTP 503", ExternalID: "x-1", ExternalURL: "https://x/1"}
	if err := e.l.RecordDelivery(ctx, rec); err != nil {
		t.Fatal(err)
	}
	d := check("req-new", true, true).Delivery
	if d.Target != rec.Target || d.State != rec.State || d.Attempts != 3 || !d.NextAttemptAt.Equal(next) ||
		d.LastError != rec.LastError || d.ExternalID != rec.ExternalID || d.ExternalURL != rec.ExternalURL || !d.UpdatedAt.Equal(e.clock.Now()) {
		t.Fatalf("record read back as %+v, wrote %+v", d, rec)
	}
	// A record needs its ledger row: the forwarder never delivers a
	// message the ledger does not hold, and nothing is written for one.
	err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: "never-seen", Target: "local", State: string(request.StatusDelivered), Attempts: 1})
	if !errors.Is(err, request.ErrNotFound) {
		t.Fatalf("RecordDelivery for a request never accepted: %v, want ErrNotFound", err)
	}
	check("never-seen", false, false)
	if n := fixture.Count(t, fixture.Raw(t, e.path), `SELECT count(*) FROM deliveries`); n != 1 {
		t.Fatalf("%d delivery records, want 1", n)
	}
}

// TestRecordDeliveryIsConditional: a write goes ahead only from the version
// its writer read, so of two copies of one message that read the same
// record only one acts; a delivery, a fact, replaces any other state.
func TestRecordDeliveryIsConditional(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	if _, err := e.l.Create(ctx, newRequest("req-cas")); err != nil {
		t.Fatal(err)
	}
	rec := func(state string, version int64) error {
		return e.l.RecordDelivery(ctx, request.Delivery{RequestID: "req-cas", Target: "local", State: state, Attempts: 1, Version: version})
	}
	version := func() int64 {
		t.Helper()
		d, found, err := e.l.Delivery(ctx, "req-cas")
		if err != nil || !found {
			t.Fatalf("Delivery: %+v, %v, %v", d, found, err)
		}
		return d.Version
	}
	steps := []struct {
		state       string
		from        int64
		stale       bool
		wantVersion int64
	}{
		{request.DeliveryAttempting, 0, false, 1},      // the first copy's claim
		{request.DeliveryAttempting, 0, true, 1},       // the second copy read "none" too: refused
		{string(request.StatusRetrying), 1, false, 2},  // the first copy's outcome
		{string(request.StatusUncertain), 1, true, 2},  // a copy that read version 1: refused
		{string(request.StatusDelivered), 1, false, 3}, // a delivery from a stale read still counts
		{string(request.StatusDelivered), 3, false, 4}, // (from the current version, it is an ordinary write)
		{string(request.StatusDelivered), 1, true, 4},  // but does not replace a delivery from a stale read
		{string(request.StatusUncertain), 2, true, 4},  // nor does anything else
	}
	for i, s := range steps {
		err := rec(s.state, s.from)
		if s.stale != errors.Is(err, request.ErrStale) || (!s.stale && err != nil) {
			t.Fatalf("step %d: %s from version %d: %v, want stale %v", i, s.state, s.from, err, s.stale)
		}
		if v := version(); v != s.wantVersion {
			t.Fatalf("step %d: version %d, want %d", i, v, s.wantVersion)
		}
	}
	// An operator's action moves the version too, so a copy that read the
	// record before it cannot undo it.
	if err := rec(string(request.StatusUncertain), 4); err != nil {
		t.Fatal(err)
	}
	if err := e.l.Resolve(ctx, "req-cas", false, ""); err != nil {
		t.Fatal(err)
	}
	if err := rec(string(request.StatusRetrying), 5); !errors.Is(err, request.ErrStale) {
		t.Fatalf("write from before the operator's resolve: %v, want ErrStale", err)
	}
}

// Concurrent PriorDelivery calls share queries; each still gets its own
// request's answer, whatever batch it lands in.
func TestPriorDeliveryConcurrent(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	const n = 40
	for i := range n {
		id := fmt.Sprintf("req-%02d", i)
		switch i % 3 {
		case 0: // never accepted
			continue
		case 2: // with a delivery record
			if _, err := e.l.Create(ctx, newRequest(id)); err != nil {
				t.Fatal(err)
			}
			if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: "local", State: string(request.StatusRetrying), Attempts: i}); err != nil {
				t.Fatal(err)
			}
		default:
			if _, err := e.l.Create(ctx, newRequest(id)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 5*n)
	for range 5 {
		for i := range n {
			wg.Go(func() {
				id := fmt.Sprintf("req-%02d", i)
				p, err := e.l.PriorDelivery(ctx, id)
				switch {
				case err != nil:
					errs <- err
				case p.Delivery.RequestID != id || p.Accepted != (i%3 != 0) || p.Found != (i%3 == 2):
					errs <- fmt.Errorf("%s: %+v", id, p)
				case p.Accepted && (p.Ticket.RequestID != id || p.Ticket.ID != ticket.IDFor(id)):
					errs <- fmt.Errorf("%s: ticket %+v", id, p.Ticket)
				case p.Found && p.Delivery.Attempts != i:
					errs <- fmt.Errorf("%s: attempts %d, want %d", id, p.Delivery.Attempts, i)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
