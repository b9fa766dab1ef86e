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
}

// Delivery outcomes used as the "outcome" label of Deliveries.
const (
	OutcomeDelivered = "delivered"
	OutcomeRetrying  = "retrying"
	OutcomeFailed    = "failed"
	OutcomeUncertain = "uncertain"
)

func newDelivery() Delivery {
	byTarget := []string{"target"}
	return Delivery{
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "deliveries_total",
			Help: "Delivery attempts by target and outcome (delivered, retrying, failed, uncertain).",
		}, []string{"target", "outcome"}),
		DeliveryAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "delivery_attempts_total",
			Help: "Calls made to a downstream, by target.",
		}, byTarget),
		DeliveryDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "delivery_duration_seconds",
			Help:    "Duration of one downstream call, by target.",
			Buckets: prometheus.DefBuckets,
		}, byTarget),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "dead_letters_total",
			Help: "Requests that ended failed (permanent error or attempts exhausted), by target.",
		}, byTarget),
		AuthFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "auth_failures_total",
			Help: "Deliveries refused by a downstream for authentication or permission (401/403), by target: an expired or revoked credential.",
		}, byTarget),
		Uncertain: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "uncertain_requests_total",
			Help: "Requests whose delivery outcome could not be established, by target.",
		}, byTarget),
		RedeliveredSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "redeliveries_skipped_total",
			Help: "Messages acknowledged without calling the downstream: redeliveries of requests already settled, messages for requests the store does not hold (settled and pruned, or never accepted), and messages on another target's subject than their ticket's.",
		}, byTarget),
		ConnectionsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "downstream_connections_open",
			Help: "Network connections to a target's API open now (dialed and not yet closed), by target; bounded by the workers per host the target calls.",
		}, byTarget),
		ConnectionsOpened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "downstream_connections_opened_total",
			Help: "Network connections dialed to a target's API, by target: after warm-up it grows only when the API or the idle timeout closes connections.",
		}, byTarget),
		RateLimitWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "downstream_rate_limit_waits_total",
			Help: "Downstream calls that waited for the target's configured rate limit (rate_limit) before being made, by target.",
		}, byTarget),
		RateLimitWaited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "downstream_rate_limit_wait_seconds_total",
			Help: "Time downstream calls spent waiting for the target's configured rate limit, by target.",
		}, byTarget),
	}
}

func (d *Delivery) register(reg prometheus.Registerer) {
	reg.MustRegister(d.Deliveries, d.DeliveryAttempts, d.DeliveryDuration, d.DeadLetters, d.AuthFailures, d.Uncertain,
		d.RedeliveredSkipped, d.ConnectionsOpen, d.ConnectionsOpened, d.RateLimitWaits, d.RateLimitWaited)
}
