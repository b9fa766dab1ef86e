package targets_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/targets"
	"ticketrelay/metrics"
	"ticketrelay/testkit/conntest"
	"ticketrelay/testkit/testwait"
)

// connReceiver is a webhook receiver that counts its posts and the
// connections it is given and sees closed (http.Server.ConnState).
type connReceiver struct {
	srv   *httptest.Server
	conns conntest.Conns

	mu    sync.Mutex
	posts int
}

func newConnReceiver(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) *connReceiver {
	t.Helper()
	c := &connReceiver{}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.posts++
		c.mu.Unlock()
		handle(w, r)
	}))
	c.srv.Config.ConnState = c.conns.Hook
	c.srv.Start()
	t.Cleanup(c.srv.Close)
	return c
}

func (c *connReceiver) postCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.posts
}

// More concurrent deliveries than the target's workers share the target's
// connections: the pool turns none away, no more than the workers stay
// open, the gauge exceeds the workers only by connections being closed,
// and the metrics count exactly what the receiver saw. Go's default
// transport (2 idle connections per host, no bound) dials one connection
// per concurrent call here, and dials again and again.
func TestConnectionsBoundedAndCounted(t *testing.T) {
	const workers, callers, perCaller = 4, 32, 8
	m := metrics.NewDispatcher(prometheus.NewRegistry())
	open := m.ConnectionsOpen.WithLabelValues("hook")
	var (
		gmu      sync.Mutex
		maxGauge float64
	)
	rcv := newConnReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
		gmu.Lock()
		maxGauge = max(maxGauge, testutil.ToFloat64(open))
		gmu.Unlock()
		time.Sleep(5 * time.Millisecond) // the receiver's latency: calls overlap
		w.WriteHeader(http.StatusOK)
	})
	tgs, closeAll, err := targets.Open([]targets.Def{{Name: "hook", Kind: "webhook", Endpoint: rcv.srv.URL}}, t.TempDir(), time.Now,
		targets.WithWorkers(workers), targets.WithMetrics(m))
	if err != nil {
		t.Fatal(err)
	}
	var tr conntest.Trace
	ctx := tr.Context(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, callers*perCaller)
	for c := range callers {
		wg.Go(func() {
			for i := range perCaller {
				if _, err := tgs[0].Deliver(ctx, downstreamtest.NewDelivery(fmt.Sprintf("req-%d-%d", c, i))); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("delivery: %v", err)
	}
	if posts := rcv.postCount(); posts != callers*perCaller {
		t.Fatalf("receiver got %d posts, want %d", posts, callers*perCaller)
	}
	gmu.Lock()
	conntest.CheckPool(t, conntest.Pool{
		Limit:  workers,
		Trace:  &tr,
		Server: &rcv.conns,
		Opened: func() float64 { return testutil.ToFloat64(m.ConnectionsOpened.WithLabelValues("hook")) },
		Open:   func() float64 { return testutil.ToFloat64(open) },
	}, maxGauge)
	gmu.Unlock()
	if err := closeAll(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the open-connections gauge to fall to 0 once the targets are closed", func() bool {
		return testutil.ToFloat64(open) == 0
	})
}
