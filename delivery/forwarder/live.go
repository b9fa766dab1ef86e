package forwarder

import (
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"

	"ticketrelay/metrics"
)

// TargetLive is what a target's forwarder is doing now, for the
// operator's console.
type TargetLive struct {
	Target string
	// Limit is the calls it may have in flight now (the adaptive limit),
	// InFlight those running.
	Limit, InFlight int
	// PausedUntil: no call starts before it, as a 429's Retry-After asked;
	// zero or past when not paused.
	PausedUntil time.Time
	// Delivered counts the deliveries this process recorded since it
	// started (the console derives a rate from two readings).
	Delivered float64
}

// Live reads every target's TargetLive, by name.
func (f *Forwarder) Live() []TargetLive {
	out := make([]TargetLive, 0, len(f.concurrency))
	for name, a := range f.concurrency {
		limit, inflight, until := a.snapshot()
		var m dto.Metric
		if err := f.metrics.Deliveries.WithLabelValues(name, metrics.OutcomeDelivered).Write(&m); err != nil {
			m.Counter = nil
		}
		out = append(out, TargetLive{Target: name, Limit: limit, InFlight: inflight, PausedUntil: until,
			Delivered: m.GetCounter().GetValue()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out
}
