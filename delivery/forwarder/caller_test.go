package forwarder_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/webhook"
	"ticketrelay/delivery/downstream/webhook/webhooktest"
	"ticketrelay/request"
	"ticketrelay/ticket"
)

// A target with caller: footer receives the footer naming the caller
// recorded with the ticket, and the resend after a lost answer carries the
// same bytes: the receiver, which answers 422 to a key reused with another
// payload, replays its first answer, and holds one ticket. A target
// without the option receives no trace of the caller.
func TestCallerFooterIsTheSameOnEveryAttempt(t *testing.T) {
	e := newEnv(t)
	withFooter := webhooktest.New(t, webhooktest.Options{})
	plain := webhooktest.New(t, webhooktest.Options{})
	var targets []downstream.Target
	for name, f := range map[string]*webhooktest.Fake{"hook": withFooter, "plain": plain} {
		tg, err := webhook.New(webhook.Config{Name: name, URL: f.URL()})
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, tg)
	}
	withFooter.Faults.Next(downstreamtest.LoseResponse)
	cfg := testConfig()
	cfg.Callers = map[string]downstream.CallerMode{"hook": downstream.CallerFooter}
	e.startForwarder(t, cfg, targets...)

	caller := ticket.Caller{Subject: "idp.example.com/u1", Name: "Alice Example", Email: "alice@example.com"}
	ids := map[string]string{}
	for _, target := range []string{"hook", "plain"} {
		r := ticket.Request{RequestID: uuid.NewString(), Subject: caller.Subject, Caller: caller, Tool: "create_ticket",
			Target: target, Title: "Disk full", Body: "db-1 is at 100%"}
		if err := r.Normalize(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.l.Create(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		ids[target] = r.RequestID
	}
	for target, id := range ids {
		waitFor(t, 15*time.Second, target+" delivered", func() bool {
			st, err := e.l.Find(context.Background(), caller.Subject, id)
			return err == nil && st.Status == request.StatusDelivered
		})
	}
	if withFooter.Faults.Served() < 2 {
		t.Fatalf("the receiver saw %d calls; want the lost answer's resend too", withFooter.Faults.Served())
	}
	if withFooter.Count() != 1 {
		t.Fatalf("the receiver holds %d tickets after the resend; want 1", withFooter.Count())
	}
	body := deliveredBody(t, withFooter)
	if want := "db-1 is at 100%\n\n---\nFiled by an agent for alice@example.com via ticketrelay"; body != want {
		t.Errorf("delivered body %q, want %q", body, want)
	}
	raw := string(plain.Deliveries()[0].Body)
	if body := deliveredBody(t, plain); body != "db-1 is at 100%" || strings.Contains(raw, "alice") || strings.Contains(raw, "caller") {
		t.Errorf("the target without the option received %s", raw)
	}
}

// deliveredBody is the body of the one ticket f received.
func deliveredBody(t *testing.T, f *webhooktest.Fake) string {
	t.Helper()
	ds := f.Deliveries()
	if len(ds) != 1 {
		t.Fatalf("%d deliveries, want 1", len(ds))
	}
	var v struct {
		Data struct {
			Body string `json:"body"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ds[0].Body, &v); err != nil {
		t.Fatalf("payload %s: %v", ds[0].Body, err)
	}
	return v.Data.Body
}
