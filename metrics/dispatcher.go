package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Dispatcher holds the collectors of the dispatcher, by concern: relay,
// stream audit, delivery, ledger, and its group-commit writer. The groups
// are embedded, so that each collector is a field of Dispatcher.
type Dispatcher struct {
	Relay
	Audit
	Delivery
	Ledger
	Writer *Writer
}

// NewDispatcher creates the dispatcher collectors and registers them on reg.
func NewDispatcher(reg prometheus.Registerer) *Dispatcher {
	d := &Dispatcher{Relay: newRelay(), Audit: newAudit(), Delivery: newDelivery(), Ledger: newLedger(), Writer: newWriter()}
	d.Relay.register(reg)
	d.Audit.register(reg)
	d.Delivery.register(reg)
	d.Ledger.register(reg)
	d.Writer.register(reg)
	return d
}

// Init exports, at 0, every series of the per-target collectors for the
// targets this dispatcher serves (and every outcome of Deliveries), so that
// Prometheus sees the first dead letter, auth failure or uncertain request
// after a start as an increase from 0: a counter series that first appears
// at 1 never increases, and increase() would never see it. Forwarders label
// only with the targets they serve, so nothing else needs a series; the
// audit's unserved targets cannot be known in advance (alerts.yml handles
// that series appearing).
func (d *Dispatcher) Init(targets []string) {
	for _, t := range targets {
		for _, o := range []string{OutcomeDelivered, OutcomeRetrying, OutcomeFailed, OutcomeUncertain} {
			d.Deliveries.WithLabelValues(t, o)
		}
		d.Dispatched.WithLabelValues(t)
		d.DeliveryAttempts.WithLabelValues(t)
		d.DeliveryDuration.WithLabelValues(t)
		d.DeadLetters.WithLabelValues(t)
		d.AuthFailures.WithLabelValues(t)
		d.Uncertain.WithLabelValues(t)
		d.RedeliveredSkipped.WithLabelValues(t)
	}
}
