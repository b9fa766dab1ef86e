package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Relay holds the collectors of the relay: outbox rows on their way to
// JetStream.
type Relay struct {
	OutboxBacklog   prometheus.Gauge
	OutboxOldestAge prometheus.Gauge
	Dispatched      *prometheus.CounterVec // target
	DuplicateAcks   prometheus.Counter
	BatchFallbacks  prometheus.Counter
	PublishErrors   prometheus.Counter
	CommitToAck     prometheus.Histogram
	LeaseHeld       prometheus.Gauge
	RelayWakeups    prometheus.Counter
}

func newRelay() Relay {
	return Relay{
		OutboxBacklog: newGauge("outbox_backlog",
			"Outbox rows committed but not yet acknowledged by JetStream."),
		OutboxOldestAge: newGauge("outbox_oldest_age_seconds",
			"Age of the oldest outbox row not yet acknowledged by JetStream (0 when empty)."),
		Dispatched: newCounterVec("dispatched_total",
			"Outbox rows acknowledged by JetStream, by target (duplicate acks included).", "target"),
		DuplicateAcks: newCounter("jetstream_duplicate_acks_total",
			"Publishes that JetStream acknowledged as duplicates of a stored Nats-Msg-Id (a success)."),
		BatchFallbacks: newCounter("jetstream_batch_fallbacks_total",
			"Relay batches JetStream refused as an atomic batch (most often one that repeats a stored Nats-Msg-Id, after a crash) or that failed on the way, sent again message by message."),
		PublishErrors: newCounter("jetstream_publish_errors_total",
			"Publishes that got no acknowledgement; the row stays in the outbox and is sent again."),
		CommitToAck: newHistogram("commit_to_ack_seconds",
			"Time from the ledger commit of a request to its JetStream acknowledgement.",
			[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}),
		LeaseHeld: newGauge("relay_lease_held",
			"1 while this dispatcher holds the relay lease of its database, else 0."),
		RelayWakeups: newCounter("relay_wakeups_total",
			"Wake-ups the relay received on its socket from the processes that commit outbox rows (one per commit of mcp-front's); flat while tickets flow means the relay is polling."),
	}
}

func (r *Relay) register(reg prometheus.Registerer) {
	reg.MustRegister(r.OutboxBacklog, r.OutboxOldestAge, r.Dispatched, r.DuplicateAcks, r.BatchFallbacks, r.PublishErrors,
		r.CommitToAck, r.LeaseHeld, r.RelayWakeups)
}

// Audit holds the collectors of the stream audit and the stream watcher:
// published requests looked up in the stream, and what was put back.
type Audit struct {
	AuditChecked prometheus.Counter
	StreamLost   prometheus.Counter
	Unserved     *prometheus.CounterVec // target
	// StreamRepairs counts what the dispatcher put back in the broker
	// under it: a label of StreamRepairKinds.
	StreamRepairs *prometheus.CounterVec // what
}

// StreamRepairKinds are the values of StreamRepairs' "what" label, all
// exported from the start (at 0), so that an alert fires on the first one.
var StreamRepairKinds = []string{
	"stream_missing",   // the stream was gone: created again
	"stream_config",    // its configuration was changed: set back
	"stream_lost",      // it lost published messages (recreated or purged): they were published again
	"consumer_missing", // a target's consumer was gone: created again
	"consumer_config",  // a consumer's configuration was changed: set back
}

func newAudit() Audit {
	a := Audit{
		AuditChecked: newCounter("stream_audit_checks_total",
			"Published messages not yet delivered (no delivery record, or an unsettled one untouched for -audit-after) that the audit looked up in the stream."),
		StreamLost: newCounter("stream_lost_messages_total",
			"Published messages the stream no longer held (lost by the broker, or expired) before any delivery, published again."),
		Unserved: newCounterVec("stream_audit_unserved_total",
			"Published requests the audit found waiting (never attempted, or untouched for -audit-after) for a target no running dispatcher delivers to (mcp-front and the dispatcher given different -config files).", "target"),
		StreamRepairs: newCounterVec("stream_repairs_total",
			"Repairs of the JetStream stream and consumers made under a running dispatcher, by what was repaired (see the log line of each).", "what"),
	}
	for _, k := range StreamRepairKinds {
		a.StreamRepairs.WithLabelValues(k)
	}
	return a
}

func (a *Audit) register(reg prometheus.Registerer) {
	reg.MustRegister(a.AuditChecked, a.StreamLost, a.Unserved, a.StreamRepairs)
}
