package pagerduty_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/pagerduty"
	"ticketrelay/delivery/downstream/pagerduty/pagerdutytest"
)

const (
	routingKey = "0123456789abcdef0123456789abcdef"
	apiToken   = "y_NbAkKc66ryYTWUXYEu"
)

func newTarget(t *testing.T, base, key string) *pagerduty.Target {
	t.Helper()
	tg, err := pagerduty.New(pagerduty.Config{Name: "oncall", BaseURL: base, RoutingKey: downstream.NewSecret(key)})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func newLookupTarget(t *testing.T, base, apiBase, key, token string, now func() time.Time) *pagerduty.Target {
	t.Helper()
	tg, err := pagerduty.New(pagerduty.Config{Name: "oncall", BaseURL: base, RoutingKey: downstream.NewSecret(key),
		APIToken: downstream.NewSecret(token), APIBaseURL: apiBase, HTTPConfig: downstream.HTTPConfig{Now: now}})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestConformance(t *testing.T) {
	downstreamtest.Run(t, func(t *testing.T) downstreamtest.Harness {
		f := pagerdutytest.New(t, routingKey)
		return downstreamtest.Harness{
			Target:  newTarget(t, f.URL(), routingKey),
			Faults:  &f.Faults,
			Count:   f.Count,
			BadAuth: newTarget(t, f.URL(), "ffffffffffffffffffffffffffffffff"),
			// The Events API has no 401: a wrong routing key is a 400, which
			// the adapter reports as an auth error.
			Unreachable:    newTarget(t, "http://"+downstreamtest.ClosedAddr(t), routingKey),
			Invalid:        func(d *downstream.Delivery) { d.Ticket.Title = " " },
			InvalidMessage: "'payload.summary' is missing or blank",
		}
	})
}

// The same suite with a REST API key, for tickets delivered soon after they
// were accepted (the usual case): the key changes nothing, and no lookup is
// made (an incident appears seconds after the 202: a lookup then proves
// nothing, and the open alert's dedup_key covers the resend).
func TestConformanceWithAPIKeyFreshTickets(t *testing.T) {
	downstreamtest.Run(t, func(t *testing.T) downstreamtest.Harness {
		clock := downstreamtest.NewClock(downstreamtest.NewDelivery("x").Ticket.CreatedAt.Add(pagerduty.LookupAfter - time.Second))
		f := pagerdutytest.New(t, routingKey, pagerdutytest.Options{APIToken: apiToken, Now: clock.Now})
		t.Cleanup(func() {
			if n := len(f.Lookups()); n != 0 {
				t.Errorf("%d lookups for tickets accepted less than %v ago; want none", n, pagerduty.LookupAfter)
			}
		})
		tg := func(base, key string) *pagerduty.Target {
			return newLookupTarget(t, base, f.APIURL(), key, apiToken, clock.Now)
		}
		return downstreamtest.Harness{
			Target:         tg(f.URL(), routingKey),
			Faults:         &f.Faults,
			Count:          f.Count,
			BadAuth:        tg(f.URL(), "ffffffffffffffffffffffffffffffff"),
			Unreachable:    tg("http://"+downstreamtest.ClosedAddr(t), routingKey),
			Invalid:        func(d *downstream.Delivery) { d.Ticket.Title = " " },
			InvalidMessage: "'payload.summary' is missing or blank",
		}
	})
}

func TestEventShape(t *testing.T) {
	f := pagerdutytest.New(t, routingKey)
	d := downstreamtest.NewDelivery("req-shape")
	r, err := newTarget(t, f.URL(), routingKey).Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	a := f.Alerts()
	if len(a) != 1 || a[0].DedupKey != d.Key || a[0].Summary != d.Ticket.Title || a[0].Severity != "error" || a[0].Source != "ticketrelay" {
		t.Fatalf("alerts %+v do not carry the delivery", a)
	}
	if r.ExternalID != d.Key {
		t.Fatalf("receipt %+v: want the dedup_key", r)
	}
}

// The fake keeps PagerDuty's dedup contract: the same key applies to the open
// alert; once resolved, the same key opens a new one.
func TestDedupKeyFollowsTheOpenAlert(t *testing.T) {
	f := pagerdutytest.New(t, routingKey)
	tg := newTarget(t, f.URL(), routingKey)
	d := downstreamtest.NewDelivery("req-dedup")
	for i := 1; i <= 3; i++ {
		d.Attempt = i
		if _, err := tg.Deliver(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	if a := f.Alerts(); len(a) != 1 || a[0].Events != 3 {
		t.Fatalf("three triggers with one key: %+v; want one alert with three events", a)
	}
	resolve := []byte(`{"routing_key":"` + routingKey + `","event_action":"resolve","dedup_key":"` + d.Key + `"}`)
	resp, err := http.Post(f.URL()+"/v2/enqueue", "application/json", bytes.NewReader(resolve))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("resolve: HTTP %d", resp.StatusCode)
	}
	if _, err := tg.Deliver(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if f.Count() != 2 {
		t.Fatalf("a trigger after resolve: %d alerts, want 2", f.Count())
	}
}

func TestSeverity(t *testing.T) {
	for p, want := range map[string]string{"urgent": "critical", "high": "error", "normal": "warning", "low": "info"} {
		if got := pagerduty.Severity(p); got != want {
			t.Errorf("Severity(%q) = %q, want %q", p, got, want)
		}
	}
}

func TestShortRoutingKeyIsAuth(t *testing.T) {
	f := pagerdutytest.New(t, routingKey)
	_, err := newTarget(t, f.URL(), "short").Deliver(context.Background(), downstreamtest.NewDelivery("req-short"))
	if e := downstream.Classify(err); e.Class != downstream.Auth || e.StatusCode != 400 {
		t.Fatalf("short routing key: %v; want an auth error from HTTP 400", err)
	}
}

// lateResend is the case the lookup is for: the first trigger's answer is
// lost, a responder resolves the alert, and the resend comes after
// LookupAfter (a retry after an outage, a redrive).
func lateResend(t *testing.T, withAPIKey bool) (*pagerdutytest.Fake, downstream.Receipt, downstream.Delivery) {
	t.Helper()
	d := downstreamtest.NewDelivery("req-late")
	clock := downstreamtest.NewClock(d.Ticket.CreatedAt.Add(time.Second))
	f := pagerdutytest.New(t, routingKey, pagerdutytest.Options{APIToken: apiToken, Now: clock.Now, IncidentLag: 5 * time.Second})
	tg := newTarget(t, f.URL(), routingKey)
	if withAPIKey {
		tg = newLookupTarget(t, f.URL(), f.APIURL(), routingKey, apiToken, clock.Now)
	}
	f.Faults.Next(downstreamtest.LoseResponse)
	_, err := tg.Deliver(context.Background(), d)
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Transient || !e.MayHaveActed {
		t.Fatalf("lost answer: %v; want a transient error that may have acted", err)
	}
	if f.Count() != 1 {
		t.Fatalf("the lost trigger opened %d alerts, want 1", f.Count())
	}
	clock.Add(30 * time.Second)
	if !f.Resolve(d.Key) {
		t.Fatal("no open alert to resolve")
	}
	clock.Add(pagerduty.LookupAfter)
	d.Attempt = 2
	r, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatalf("late resend: %v", err)
	}
	return f, r, d
}

func TestLateResendFindsTheResolvedIncident(t *testing.T) {
	f, r, d := lateResend(t, true)
	if f.Count() != 1 {
		t.Fatalf("the late resend opened a second alert (%d alerts): it paged again", f.Count())
	}
	if f.Faults.Served() != 1 {
		t.Fatalf("%d triggers sent; want only the first (the resend found the incident)", f.Faults.Served())
	}
	a := f.Alerts()[0]
	if r.ExternalID != a.IncidentID || r.URL != pagerdutytest.WebURL+"/incidents/"+a.IncidentID {
		t.Fatalf("receipt %+v; want incident %s and its html_url", r, a.IncidentID)
	}
	l := f.Lookups()
	if len(l) != 1 {
		t.Fatalf("%d lookups, want 1", len(l))
	}
	q := l[0].Query
	if q.Get("incident_key") != d.Key || q.Get("date_range") != "all" || !strings.Contains(strings.Join(q["statuses[]"], ","), "resolved") {
		t.Fatalf("lookup query %v; want incident_key %q, date_range=all, resolved among the statuses", q, d.Key)
	}
	if l[0].Accept != "application/vnd.pagerduty+json;version=2" {
		t.Fatalf("lookup Accept %q", l[0].Accept)
	}
}

// Without a REST API key the adapter cannot tell: the late resend opens a
// second alert. This is the documented limit of the target without one.
func TestLateResendWithoutAPIKeyPagesAgain(t *testing.T) {
	f, r, d := lateResend(t, false)
	if f.Count() != 2 {
		t.Fatalf("%d alerts; PagerDuty opens a new alert for a trigger after resolve, want 2", f.Count())
	}
	if len(f.Lookups()) != 0 || r.ExternalID != d.Key {
		t.Fatalf("lookups %d, receipt %+v; want none and the dedup_key", len(f.Lookups()), r)
	}
}

// A redrive more than a month later: the incident list's default window is
// the last month; the lookup asks for every date.
func TestLookupFindsAnIncidentOlderThanAMonth(t *testing.T) {
	d := downstreamtest.NewDelivery("req-old")
	clock := downstreamtest.NewClock(d.Ticket.CreatedAt)
	f := pagerdutytest.New(t, routingKey, pagerdutytest.Options{APIToken: apiToken, Now: clock.Now})
	tg := newLookupTarget(t, f.URL(), f.APIURL(), routingKey, apiToken, clock.Now)
	first, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if first.ExternalID != d.Key || len(f.Lookups()) != 0 {
		t.Fatalf("first delivery: receipt %+v, %d lookups; want the dedup_key and no lookup", first, len(f.Lookups()))
	}
	f.Resolve(d.Key)
	clock.Add(40 * 24 * time.Hour)
	d.Attempt = 1 // a redrive counts again
	r, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if f.Count() != 1 || r.ExternalID != f.Alerts()[0].IncidentID {
		t.Fatalf("redrive after 40 days: %d alerts, receipt %+v; want the first incident", f.Count(), r)
	}
}

// A resend moments after a lost answer, of a ticket accepted long ago: the
// incident is not visible yet, so the lookup misses and the trigger is sent;
// it applies to the alert the first trigger opened.
func TestLookupMissBeforeTheIncidentAppearsStillDedups(t *testing.T) {
	d := downstreamtest.NewDelivery("req-lag")
	clock := downstreamtest.NewClock(d.Ticket.CreatedAt.Add(3 * time.Hour))
	f := pagerdutytest.New(t, routingKey, pagerdutytest.Options{APIToken: apiToken, Now: clock.Now, IncidentLag: 5 * time.Second})
	tg := newLookupTarget(t, f.URL(), f.APIURL(), routingKey, apiToken, clock.Now)
	f.Faults.Next(downstreamtest.LoseResponse)
	if _, err := tg.Deliver(context.Background(), d); err == nil {
		t.Fatal("lost answer succeeded")
	}
	clock.Add(time.Second)
	d.Attempt = 2
	r, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if a := f.Alerts(); len(a) != 1 || a[0].Events != 2 || r.ExternalID != d.Key || len(f.Lookups()) != 2 {
		t.Fatalf("alerts %+v, receipt %+v, %d lookups; want one alert with two triggers, two lookups", a, r, len(f.Lookups()))
	}
}

func TestLookupErrors(t *testing.T) {
	d := downstreamtest.NewDelivery("req-lookup-error")
	clock := downstreamtest.NewClock(d.Ticket.CreatedAt.Add(time.Hour))
	// Each case on a fresh fake: Go's client resends a GET once when a
	// reused connection fails before an answer, which would hide the fault.
	for _, c := range []struct {
		name   string
		fault  downstreamtest.Fault
		status int
	}{
		{"500", downstreamtest.ServerError, 500},
		{"429", downstreamtest.RateLimited, 429},
		{"reset", downstreamtest.ResetBeforeProcessing, 0},
		{"lost answer", downstreamtest.LoseResponse, 0},
	} {
		f := pagerdutytest.New(t, routingKey, pagerdutytest.Options{APIToken: apiToken, Now: clock.Now})
		f.LookupFaults.Next(c.fault)
		_, err := newLookupTarget(t, f.URL(), f.APIURL(), routingKey, apiToken, clock.Now).Deliver(context.Background(), d)
		e := downstream.Classify(err)
		if err == nil || e.Class != downstream.Transient || e.MayHaveActed || e.StatusCode != c.status || !strings.Contains(err.Error(), "looking up the incident") {
			t.Errorf("%s: %v (class %s, may have acted %v, HTTP %d); want a transient lookup error that did not act, HTTP %d",
				c.name, err, e.Class, e.MayHaveActed, e.StatusCode, c.status)
		}
		if f.Faults.Served() != 0 || f.Count() != 0 {
			t.Errorf("%s: %d triggers sent, %d alerts after a failed lookup; want none", c.name, f.Faults.Served(), f.Count())
		}
	}
	f := pagerdutytest.New(t, routingKey, pagerdutytest.Options{APIToken: apiToken, Now: clock.Now})
	refused := newLookupTarget(t, f.URL(), "http://"+downstreamtest.ClosedAddr(t), routingKey, apiToken, clock.Now)
	if _, err := refused.Deliver(context.Background(), d); downstream.Classify(err).Class != downstream.Transient || downstream.Classify(err).MayHaveActed {
		t.Errorf("REST API unreachable: %v; want transient, not acted", err)
	}
	// A REST key PagerDuty refuses: an auth error (it would be refused on
	// every retry), never a blind trigger.
	_, err := newLookupTarget(t, f.URL(), f.APIURL(), routingKey, "revoked-token", clock.Now).Deliver(context.Background(), d)
	if e := downstream.Classify(err); e.Class != downstream.Auth || e.StatusCode != 401 || e.MayHaveActed || !strings.Contains(err.Error(), "Authentication failed") {
		t.Errorf("bad REST key: %v; want an auth error from HTTP 401 carrying PagerDuty's message", err)
	}
	if f.Faults.Served() != 0 || f.Count() != 0 {
		t.Fatalf("%d triggers sent, %d alerts after failed lookups; want none", f.Faults.Served(), f.Count())
	}
	if err != nil && strings.Contains(err.Error(), "revoked-token") {
		t.Fatalf("the error shows the key: %v", err)
	}
}

func TestFind(t *testing.T) {
	d := downstreamtest.NewDelivery("req-find")
	clock := downstreamtest.NewClock(d.Ticket.CreatedAt)
	f := pagerdutytest.New(t, routingKey, pagerdutytest.Options{APIToken: apiToken, Now: clock.Now, IncidentLag: -1})
	tg := newLookupTarget(t, f.URL(), f.APIURL(), routingKey, apiToken, clock.Now)
	if _, ok, err := tg.Find(context.Background(), d); ok || err != nil {
		t.Fatalf("Find before any trigger: %v, %v; want not found", ok, err)
	}
	// Two incidents with the key (triggered, resolved, triggered again),
	// and one with another key: Find answers the first.
	for i, req := range []string{"req-find", "req-other", "req-find"} {
		clock.Add(time.Minute)
		if _, err := tg.Deliver(context.Background(), downstreamtest.NewDelivery(req)); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			f.Resolve(d.Key)
		}
	}
	r, ok, err := tg.Find(context.Background(), d)
	if err != nil || !ok || r.ExternalID != f.Alerts()[0].IncidentID {
		t.Fatalf("Find = %+v, %v, %v; want the first incident %s", r, ok, err, f.Alerts()[0].IncidentID)
	}
	// Without a REST API key there is nothing to look with.
	if _, _, err := newTarget(t, f.URL(), routingKey).Find(context.Background(), d); downstream.Classify(err).Class != downstream.Permanent {
		t.Fatalf("Find without a key: %v; want a permanent error", err)
	}
}

func TestNewAPIOptions(t *testing.T) {
	rk := downstream.NewSecret(routingKey)
	if _, err := pagerduty.New(pagerduty.Config{Name: "p", RoutingKey: rk, APIBaseURL: "https://api.example"}); err == nil ||
		!strings.Contains(err.Error(), "without a REST API key") {
		t.Fatalf("an API endpoint without a key: %v", err)
	}
	if _, err := pagerduty.New(pagerduty.Config{Name: "p", RoutingKey: rk, APIToken: downstream.NewSecret("k"), APIBaseURL: "api.example"}); err == nil ||
		!strings.Contains(err.Error(), "not an http(s) URL") {
		t.Fatalf("a malformed API endpoint: %v", err)
	}
	tg, err := pagerduty.New(pagerduty.Config{Name: "p", RoutingKey: rk, APIToken: downstream.NewSecret("s3cr3t-rest-key")})
	if err != nil {
		t.Fatal(err)
	}
	if tg.Capabilities() != pagerduty.Capabilities {
		t.Fatalf("capabilities %+v change with the key", tg.Capabilities())
	}
}
