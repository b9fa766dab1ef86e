package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Ledger holds the collectors of the ledger as the dispatcher sees it.
type Ledger struct {
	Pruned         prometheus.Counter
	LedgerRequests *ReadGauge
}

func newLedger() Ledger {
	return Ledger{
		Pruned: newCounter("ledger_pruned_total",
			"Settled requests removed from the ledger after their retention."),
		LedgerRequests: newReadGauge(prometheus.BuildFQName(namespace, "", "ledger_requests"),
			"Requests held in the ledger (counted when scraped)."),
	}
}

func (l *Ledger) register(reg prometheus.Registerer) {
	reg.MustRegister(l.Pruned, l.LedgerRequests)
}

// readTimeout bounds one read of a ReadGauge, so that a scrape never waits
// on a busy database for long.
const readTimeout = 5 * time.Second

// ReadGauge is a gauge whose value is read when it is scraped, from the
// function given to ReadFrom: it shows the state of the moment. A value
// set by some periodic task instead lags behind the state by up to the
// task's period: the ledger_requests gauge, set by each pruning round
// (once a minute, the first at the dispatcher's start, when a new
// installation's ledger is empty), read 0 for the minute after the first
// request was accepted. Until ReadFrom, and after a read that failed, it
// shows the last value read (0 at first).
type ReadGauge struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	read func(context.Context) (float64, error)
	last float64
}

func newReadGauge(name, help string) *ReadGauge {
	return &ReadGauge{desc: prometheus.NewDesc(name, help, nil, nil)}
}

// ReadFrom sets the function the gauge reads its value from.
func (g *ReadGauge) ReadFrom(read func(context.Context) (float64, error)) {
	g.mu.Lock()
	g.read = read
	g.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (g *ReadGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector: it reads the value now.
func (g *ReadGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.read != nil {
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		if v, err := g.read(ctx); err == nil {
			g.last = v
		}
		cancel()
	}
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.last)
}
