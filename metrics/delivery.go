package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Delivery holds the collectors of the forwarders: calls to the targets,
// by target.
type Delivery struct {
	Deliveries         *prometheus.CounterVec   // target, outcome
	DeliveryAttempts   *prometheus.CounterVec   // target
	DeliveryDuration   *prometheus.HistogramVec // target
	DeadLetters        *prometheus.CounterVec   // target
	AuthFailures       *prometheus.CounterVec   // target
	Uncertain          *prometheus.CounterVec   // target
	RedeliveredSkipped *prometheus.CounterVec   // target
	ConnectionsOpen    *prometheus.GaugeVec     // target
	ConnectionsOpened  *prometheus.CounterVec   // target
	RateLimitWaits     *prometheus.CounterVec   // target
	RateLimitWaited    *prometheus.CounterVec   // target
	ConcurrencyLimit   *prometheus.GaugeVec     // target
	ConcurrencyWaited  *prometheus.CounterVec   // target
	ReadAhead          *prometheus.CounterVec   // target
	Draining           prometheus.Gauge
}

// Delivery outcomes used as the "outcome" label of Deliveries.
const (
	OutcomeDelivered = "delivered"
	OutcomeRetrying  = "retrying"
	OutcomeFailed    = "failed"
	OutcomeUncertain = "uncertain"
)

func newDelivery() Delivery {
	return Delivery{
		Deliveries: newCounterVec("deliveries_total",
			"Delivery attempts by target and outcome (delivered, retrying, failed, uncertain).", "target", "outcome"),
		DeliveryAttempts: newCounterVec("delivery_attempts_total",
			"Calls made to a downstream, by target.", "target"),
		DeliveryDuration: newHistogramVec("delivery_duration_seconds",
			"Duration of one downstream call, by target.",
			prometheus.DefBuckets, "target"),
		DeadLetters: newCounterVec("dead_letters_total",
			"Requests that ended failed (permanent error or attempts exhausted), by target.", "target"),
		AuthFailures: newCounterVec("auth_failures_total",
			"Deliveries refused by a downstream for authentication or permission (401/403), by target: an expired or revoked credential.", "target"),
		Uncertain: newCounterVec("uncertain_requests_total",
			"Requests whose delivery outcome could not be established, by target.", "target"),
		RedeliveredSkipped: newCounterVec("redeliveries_skipped_total",
			"Messages acknowledged without calling the downstream: redeliveries of requests already settled, messages for requests the store does not hold (settled and pruned, or never accepted), and messages on another target's subject than their ticket's.", "target"),
		ConnectionsOpen: newGaugeVec("downstream_connections_open",
			"Network connections to a target's API open now (dialed and not yet closed), by target; bounded by the workers per host the target calls.", "target"),
		ConnectionsOpened: newCounterVec("downstream_connections_opened_total",
			"Network connections dialed to a target's API, by target: after warm-up it grows only when the API or the idle timeout closes connections.", "target"),
		RateLimitWaits: newCounterVec("downstream_rate_limit_waits_total",
			"Downstream calls that waited for the target's configured rate limit (rate_limit) before being made, by target.", "target"),
		RateLimitWaited: newCounterVec("downstream_rate_limit_wait_seconds_total",
			"Time downstream calls spent waiting for the target's configured rate limit, by target.", "target"),
		ConcurrencyLimit: newGaugeVec("downstream_concurrency_limit",
			"Calls a target may have in flight now, by target: from 16 (the local target 64) up to its workers, doubling each round trip until the first 429, overload error or latency rise, then less after those and climbing back by one a round trip as calls succeed.", "target"),
		ConcurrencyWaited: newCounterVec("downstream_concurrency_wait_seconds_total",
			"Time downstream calls spent waiting for a place under the target's concurrency limit or for the end of a pause a 429's Retry-After asked for, by target.", "target"),
		ReadAhead: newCounterVec("forwarder_read_ahead_total",
			"Delivery attempts that used the ledger record read in one query with other pulled messages', instead of a read of their own, by target.", "target"),
		Draining: newGauge("forwarder_draining",
			"1 while the forwarder drains a backlog (a pull within the last second left 1,000 or more messages behind it in a target's consumer), when the dispatcher collects garbage less often; else 0."),
	}
}

func (d *Delivery) register(reg prometheus.Registerer) {
	reg.MustRegister(d.Deliveries, d.DeliveryAttempts, d.DeliveryDuration, d.DeadLetters, d.AuthFailures, d.Uncertain,
		d.RedeliveredSkipped, d.ConnectionsOpen, d.ConnectionsOpened, d.RateLimitWaits, d.RateLimitWaited,
		d.ConcurrencyLimit, d.ConcurrencyWaited, d.ReadAhead, d.Draining)
}
