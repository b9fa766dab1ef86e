package zendesk_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/zendesk"
	"ticketrelay/delivery/downstream/zendesk/zendesktest"
	"ticketrelay/ticket"
)

const email, token = "bot@acme.test", "api-token-1"

func newTarget(t *testing.T, base, tok string, now func() time.Time) *zendesk.Target {
	t.Helper()
	tg, err := zendesk.New(zendesk.Config{Name: "support", BaseURL: base, Email: email, Token: downstream.NewSecret(tok), HTTPConfig: downstream.HTTPConfig{Now: now}})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestConformance(t *testing.T) {
	downstreamtest.Run(t, func(t *testing.T) downstreamtest.Harness {
		f := zendesktest.New(t, email, token, nil)
		// The suite's deliveries were accepted at this time: the target
		// sees them as just accepted, inside the key's window.
		accepted := downstreamtest.NewClock(downstreamtest.NewDelivery("x").Ticket.CreatedAt)
		return downstreamtest.Harness{
			Target:         newTarget(t, f.URL(), token, accepted.Now),
			Faults:         &f.Faults,
			Count:          f.Count,
			BadAuth:        newTarget(t, f.URL(), "wrong", nil),
			Unreachable:    newTarget(t, "http://"+downstreamtest.ClosedAddr(t), token, nil),
			Invalid:        func(d *downstream.Delivery) { d.Ticket.Title, d.Ticket.Body = "", "" },
			InvalidMessage: "Description: cannot be blank",
		}
	})
}

// setup returns a target and fake sharing a clock, and a delivery accepted now.
func setup(t *testing.T) (*zendesk.Target, *zendesktest.Fake, *downstreamtest.Clock, downstream.Delivery) {
	clock := downstreamtest.NewClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	f := zendesktest.New(t, email, token, clock.Now)
	d := downstreamtest.NewDelivery("req-window")
	d.Ticket.CreatedAt = clock.Now()
	return newTarget(t, f.URL(), token, clock.Now), f, clock, d
}

func TestRequestShape(t *testing.T) {
	tg, f, _, d := setup(t)
	d.Ticket.Labels = []string{"two words"}
	r, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	tk := f.Tickets()[0]
	if tk.ExternalID != d.Key || tk.Subject != d.Ticket.Title || tk.Priority != "high" || tk.Desc != d.Ticket.Body {
		t.Fatalf("ticket %+v does not carry the delivery", tk)
	}
	if len(tk.Tags) != 1 || tk.Tags[0] != "two_words" {
		t.Fatalf("tags %q: a space must not split a label", tk.Tags)
	}
	if r.ExternalID != "1" || r.URL != f.URL()+"/agent/tickets/1" {
		t.Fatalf("receipt %+v", r)
	}
	if f.Lookups("miss") != 1 {
		t.Fatalf("the request carried no Idempotency-Key")
	}
}

// Inside the 2-hour window a resend is answered from Zendesk's key store.
func TestResendInsideWindowIsReplayed(t *testing.T) {
	tg, f, clock, d := setup(t)
	f.Faults.Next(downstreamtest.LoseResponse)
	if _, err := tg.Deliver(context.Background(), d); err == nil {
		t.Fatal("lost response succeeded")
	}
	clock.Add(90 * time.Minute)
	d.Attempt = 2
	r, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if f.Count() != 1 || f.Lookups("hit") != 1 || r.ExternalID != "1" {
		t.Fatalf("%d tickets, %d key hits, receipt %+v; want 1 ticket answered from the key store", f.Count(), f.Lookups("hit"), r)
	}
}

// After the window Zendesk has forgotten the key: the adapter lists by
// external_id before it resends.
func TestResendAfterWindowLooksUpFirst(t *testing.T) {
	tg, f, clock, d := setup(t)
	f.Faults.Next(downstreamtest.LoseResponse)
	if _, err := tg.Deliver(context.Background(), d); err == nil {
		t.Fatal("lost response succeeded")
	}
	clock.Add(3 * time.Hour)
	d.Attempt = 2
	r, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if f.Count() != 1 || r.ExternalID != "1" || f.Faults.Served() != 1 {
		t.Fatalf("%d tickets, %d creates, receipt %+v; want the first ticket found by external_id, no second create",
			f.Count(), f.Faults.Served(), r)
	}

	// A redrive counts attempts from 1 again, and a dispatcher killed after
	// the call recorded nothing: the lookup does not depend on the attempt.
	d.Attempt = 1
	if r, err := tg.Deliver(context.Background(), d); err != nil || r.ExternalID != "1" || f.Count() != 1 {
		t.Fatalf("first-numbered attempt after the window: %+v, %v, %d tickets; want the first ticket found", r, err, f.Count())
	}
}

// The fake forgets a key after 2 hours, as Zendesk does: without the
// lookup a late resend makes a second ticket. (What the lookup guards.)
func TestFakeForgetsKeysAfterTheWindow(t *testing.T) {
	_, f, clock, d := setup(t)
	post := func() {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, f.URL()+"/api/v2/tickets", strings.NewReader(`{"ticket":{"subject":"s","comment":{"body":"b"},"external_id":"`+d.Key+`"}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", d.Key)
		req.SetBasicAuth(email+"/token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create: HTTP %d", resp.StatusCode)
		}
	}
	post()
	post()
	if f.Count() != 1 {
		t.Fatalf("%d tickets inside the window, want 1", f.Count())
	}
	clock.Add(2 * time.Hour)
	post()
	if f.Count() != 2 {
		t.Fatalf("the fake remembered the key past 2 hours (%d tickets)", f.Count())
	}
}

// After the window with nothing created, the lookup proves absence and the
// resend creates the ticket.
func TestResendAfterWindowCreatesWhenAbsent(t *testing.T) {
	tg, f, clock, d := setup(t)
	f.Faults.Next(downstreamtest.ResetBeforeProcessing)
	if _, err := tg.Deliver(context.Background(), d); err == nil {
		t.Fatal("reset succeeded")
	}
	clock.Add(2 * time.Hour)
	d.Attempt = 2
	if _, err := tg.Deliver(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if f.Count() != 1 {
		t.Fatalf("%d tickets, want 1", f.Count())
	}
}

// The same key with another body (a build that renders the ticket
// differently from the one that sent it first) is Zendesk's 400
// IdempotentRequestError; the first call made the ticket, and it is found.
func TestSameKeyOtherBodyFindsTheFirst(t *testing.T) {
	tg, f, _, d := setup(t)
	first, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	d.Ticket.Title = "another title"
	r, err := tg.Deliver(context.Background(), d)
	if err != nil || r != first || f.Count() != 1 {
		t.Fatalf("same key, other body: %+v, %v, %d tickets; want the first ticket %+v", r, err, f.Count(), first)
	}
}

func TestNewRejectsIncompleteConfig(t *testing.T) {
	for _, c := range []zendesk.Config{
		{Name: "z", BaseURL: "acme.zendesk.com", Email: email, Token: downstream.NewSecret(token)},
		{Name: "z", BaseURL: "https://acme.zendesk.com", Token: downstream.NewSecret(token)},
		{Name: "z", BaseURL: "https://acme.zendesk.com", Email: email},
	} {
		if _, err := zendesk.New(c); err == nil {
			t.Errorf("New(%+v) accepted it", c)
		}
	}
}

// With caller: field the ticket's requester is the caller (Zendesk finds
// the end user by email or creates one with the name); a resend carries
// the same requester, so Zendesk's key store replays it instead of
// answering a key reused with another body; without a caller the API
// token's user stays the requester.
func TestRequesterIsTheCaller(t *testing.T) {
	tg, f, _, d := setup(t)
	ctx := context.Background()
	d.Ticket = downstream.Present(downstream.CallerField,
		withCaller(d.Ticket, ticket.Caller{Subject: "idp/u1", Name: "Alice Example", Email: "alice@example.com"}))
	if _, err := tg.Deliver(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Deliver(ctx, d); err != nil {
		t.Fatalf("resend: %v", err)
	}
	if f.Count() != 1 || f.Lookups("hit") != 1 {
		t.Fatalf("%d tickets, %d key hits after a resend; want 1 and 1", f.Count(), f.Lookups("hit"))
	}
	want := zendesktest.Requester{Name: "Alice Example", Email: "alice@example.com"}
	if r := f.Tickets()[0].Requester; r == nil || *r != want {
		t.Fatalf("requester = %+v, want %+v", r, want)
	}

	plain := downstreamtest.NewDelivery("req-plain")
	plain.Ticket.CreatedAt = d.Ticket.CreatedAt
	if _, err := tg.Deliver(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if r := f.Tickets()[1].Requester; r != nil {
		t.Fatalf("a ticket without a caller sent requester %+v", r)
	}
}

func withCaller(tk ticket.Ticket, c ticket.Caller) ticket.Ticket {
	tk.Caller = c
	return tk
}
