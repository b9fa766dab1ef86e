package forwarder_test

import (
	"context"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/internal/archetype"
	"ticketrelay/request"
)

// Every call is kept in the request's attempts history with its HTTP
// status, class, latency and host, not only the latest record.
func TestAttemptsHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	api.hook = func(ctx context.Context, n int, d downstream.Delivery) (behaviour, error) {
		if n == 1 {
			return failBefore, transient(503, "service unavailable")
		}
		return act, nil
	}
	cfg := testConfig()
	cfg.Host = "host-a"
	e.startForwarder(t, cfg, api)
	id := e.create(t, api.name)
	e.waitStatus(t, id, request.StatusDelivered)
	as, err := e.l.Attempts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 {
		t.Fatalf("%d attempts kept, want 2: %+v", len(as), as)
	}
	first, second := as[0], as[1]
	if first.HTTPStatus != 503 || first.Class != "transient" || first.Outcome != string(request.StatusRetrying) || first.Attempt != 1 ||
		first.Host != "host-a" || first.Latency <= 0 {
		t.Errorf("first attempt %+v, want the 503 from host-a, retrying", first)
	}
	if second.HTTPStatus != 0 || second.Class != "" || second.Outcome != string(request.StatusDelivered) || second.Attempt != 2 || !second.At.After(first.At) {
		t.Errorf("second attempt %+v, want delivered after the first", second)
	}
}

// Live reports each target's limit and deliveries.
func TestLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	f := forwarder.New(archetype.Archetype{Logger: e.log, Metrics: e.m}, testConfig(), e.js, e.l, []downstream.Target{api})
	runInBackground(t, "forwarder", f.Run)
	id := e.create(t, api.name)
	e.waitStatus(t, id, request.StatusDelivered)
	waitFor(t, 10*time.Second, "the delivery counted", func() bool {
		l := f.Live()
		return len(l) == 1 && l[0].Delivered == 1
	})
	if l := f.Live()[0]; l.Target != "tracker" || l.Limit < 1 {
		t.Errorf("live %+v", l)
	}
}
