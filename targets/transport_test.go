package targets_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/downstream/downstreamtest"
	"ticketrelay/internal/testwait"
	"ticketrelay/metrics"
	"ticketrelay/targets"
)

// connReceiver is a webhook receiver that counts the connections it is
// given (http.Server.ConnState) and how many are open at once.
type connReceiver struct {
	srv *httptest.Server

	mu                      sync.Mutex
	newConns, open, maxOpen int
	posts                   int
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
	c.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		c.mu.Lock()
		defer c.mu.Unlock()
		switch s {
		case http.StateNew:
			c.newConns++
			c.open++
			c.maxOpen = max(c.maxOpen, c.open)
		case http.StateClosed, http.StateHijacked:
			c.open--
		}
	}
	c.srv.Start()
	t.Cleanup(c.srv.Close)
	return c
}

func (c *connReceiver) counts() (newConns, maxOpen, posts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.newConns, c.maxOpen, c.posts
}

// More concurrent deliveries than the target's workers share the target's
// connections: never more than the workers are open at once, no more than
// that are ever dialed, and the metrics count exactly what the receiver
// saw. Go's default transport (2 idle connections per host, no bound)
// dials one connection per concurrent call here, and dials again and again.
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
	var wg sync.WaitGroup
	errs := make(chan error, callers*perCaller)
	for c := range callers {
		wg.Go(func() {
			for i := range perCaller {
				if _, err := tgs[0].Deliver(context.Background(), downstreamtest.NewDelivery(fmt.Sprintf("req-%d-%d", c, i))); err != nil {
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
	newConns, maxOpen, posts := rcv.counts()
	if posts != callers*perCaller {
		t.Fatalf("receiver got %d posts, want %d", posts, callers*perCaller)
	}
	if maxOpen > workers || newConns > workers {
		t.Errorf("receiver saw %d connections, %d open at once; want at most %d (the workers)", newConns, maxOpen, workers)
	}
	gmu.Lock()
	if maxGauge > workers || maxGauge < 1 {
		t.Errorf("open-connections gauge peaked at %v during calls, want 1..%d", maxGauge, workers)
	}
	gmu.Unlock()
	if got := testutil.ToFloat64(m.ConnectionsOpened.WithLabelValues("hook")); int(got) != newConns {
		t.Errorf("connections opened metric %v, receiver saw %d", got, newConns)
	}
	if err := closeAll(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the open-connections gauge to fall to 0 once the targets are closed", func() bool {
		return testutil.ToFloat64(open) == 0
	})
}
