package pagerduty_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"ticketrelay/downstream"
	"ticketrelay/downstream/downstreamtest"
	"ticketrelay/downstream/pagerduty"
	"ticketrelay/downstream/pagerduty/pagerdutytest"
)

const routingKey = "0123456789abcdef0123456789abcdef"

func newTarget(t *testing.T, base, key string) *pagerduty.Target {
	t.Helper()
	tg, err := pagerduty.New(pagerduty.Config{Name: "oncall", BaseURL: base, RoutingKey: downstream.NewSecret(key)})
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
