// Package metrics holds the Prometheus collectors of both processes.
//
// Every collector is registered on a prometheus.Registerer that the caller
// injects; nothing here touches the global registry. All names carry the
// "ticketrelay_" prefix and every label takes a bounded set of values (tool
// names, target names and fixed outcome words, never request ids).
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "ticketrelay"

// Front holds the collectors of mcp-front.
type Front struct {
	ToolCalls    *prometheus.CounterVec   // tool, outcome
	CallDuration *prometheus.HistogramVec // tool
	Replays      *prometheus.CounterVec   // tool
	Conflicts    *prometheus.CounterVec   // tool
	Rejected     *prometheus.CounterVec   // tool, reason
	HTTPRefused  *prometheus.CounterVec   // reason
	// HTTPSessionsEvicted counts the sessions closed for having made no
	// call since their initialize, by reason.
	HTTPSessionsEvicted *prometheus.CounterVec // reason
	Writer              *Writer
}

// SessionsFunc registers the gauge of live streamable-HTTP sessions, read
// from sessions when scraped.
func SessionsFunc(reg prometheus.Registerer, sessions func() int) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "http_sessions",
		Help: "Live MCP sessions over streamable HTTP (bounded by -max-sessions).",
	}, func() float64 { return float64(sessions()) }))
}

// Writer holds the collectors of the group-commit writer (both processes).
type Writer struct {
	BatchSize          prometheus.Histogram
	CommitDuration     prometheus.Histogram
	CommitErrors       prometheus.Counter
	CheckpointDuration prometheus.Histogram
	WALPendingFrames   prometheus.Gauge
}

// Dispatcher holds the collectors of the dispatcher: relay and forwarder.
type Dispatcher struct {
	OutboxBacklog      prometheus.Gauge
	OutboxOldestAge    prometheus.Gauge
	Dispatched         *prometheus.CounterVec // target
	DuplicateAcks      prometheus.Counter
	BatchFallbacks     prometheus.Counter
	PublishErrors      prometheus.Counter
	AuditChecked       prometheus.Counter
	StreamLost         prometheus.Counter
	Unserved           *prometheus.CounterVec
	CommitToAck        prometheus.Histogram
	LeaseHeld          prometheus.Gauge
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
	Pruned             prometheus.Counter
	LedgerRequests     prometheus.Gauge
	Writer             *Writer
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

// Delivery outcomes used as the "outcome" label of Deliveries.
const (
	OutcomeDelivered = "delivered"
	OutcomeRetrying  = "retrying"
	OutcomeFailed    = "failed"
	OutcomeUncertain = "uncertain"
)

// Tool call outcomes used as the "outcome" label of ToolCalls.
const (
	CallCreated  = "created"
	CallReplayed = "replayed"
	CallConflict = "conflict"
	CallInvalid  = "invalid"
	CallError    = "error"
	CallOK       = "ok"
)

// NewFront creates the mcp-front collectors and registers them on reg.
func NewFront(reg prometheus.Registerer) *Front {
	f := &Front{
		ToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "tool_calls_total",
			Help: "MCP tool calls by tool and outcome (created, replayed, conflict, invalid, error, ok).",
		}, []string{"tool", "outcome"}),
		CallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "tool_call_duration_seconds",
			Help:    "Time to answer an MCP tool call, by tool.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"tool"}),
		Replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "replays_total",
			Help: "Calls answered from the idempotency ledger without writing anything.",
		}, []string{"tool"}),
		Conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "request_id_conflicts_total",
			Help: "Calls that reused a request_id with different arguments.",
		}, []string{"tool"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "invalid_calls_total",
			Help: "Calls rejected by validation before anything was written, by tool and argument.",
		}, []string{"tool", "argument"}),
		HTTPRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "http_refused_total",
			Help: "HTTP requests refused by mcp-front's own checks and limits, by reason (bad_session_id, foreign_origin, body_too_large, body_timeout, bad_message, unauthenticated, auth_throttled, rate_limited, session_limit, client_session_limit, foreign_host, no_session, reinitialize).",
		}, []string{"reason"}),
		HTTPSessionsEvicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "http_sessions_evicted_total",
			Help: "MCP sessions closed by mcp-front for having made no call since their initialize, by reason (unused_timeout; table_full, client_full: to admit a new session at -max-sessions or at a client's share).",
		}, []string{"reason"}),
		Writer: newWriter(),
	}
	reg.MustRegister(f.ToolCalls, f.CallDuration, f.Replays, f.Conflicts, f.Rejected, f.HTTPRefused, f.HTTPSessionsEvicted)
	f.Writer.register(reg)
	return f
}

// sqliteSeconds are the buckets of the writer's SQLite durations: a commit
// and a checkpoint, from half a millisecond to a second.
var sqliteSeconds = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

func newWriter() *Writer {
	return &Writer{
		BatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "sqlite_commit_batch_size",
			Help:    "Operations committed together in one SQLite transaction (group commit).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		CommitDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "sqlite_commit_duration_seconds",
			Help:    "Time from BEGIN to a durable COMMIT of one group-commit batch.",
			Buckets: sqliteSeconds,
		}),
		CommitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "sqlite_commit_errors_total",
			Help: "Group-commit batches whose transaction failed as a whole.",
		}),
		CheckpointDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "sqlite_checkpoint_duration_seconds",
			Help:    "Time of one background WAL checkpoint (PASSIVE) of this process.",
			Buckets: sqliteSeconds,
		}),
		WALPendingFrames: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "sqlite_wal_pending_frames",
			Help: "WAL frames not yet copied into the database file after this process's last checkpoint; grows while a reader holds an old snapshot.",
		}),
	}
}

func (w *Writer) register(reg prometheus.Registerer) {
	reg.MustRegister(w.BatchSize, w.CommitDuration, w.CommitErrors, w.CheckpointDuration, w.WALPendingFrames)
}

// NewDispatcher creates the dispatcher collectors and registers them on reg.
func NewDispatcher(reg prometheus.Registerer) *Dispatcher {
	byTarget := []string{"target"}
	d := &Dispatcher{
		OutboxBacklog: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "outbox_backlog",
			Help: "Outbox rows committed but not yet acknowledged by JetStream.",
		}),
		OutboxOldestAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "outbox_oldest_age_seconds",
			Help: "Age of the oldest outbox row not yet acknowledged by JetStream (0 when empty).",
		}),
		Dispatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "dispatched_total",
			Help: "Outbox rows acknowledged by JetStream, by target (duplicate acks included).",
		}, byTarget),
		DuplicateAcks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "jetstream_duplicate_acks_total",
			Help: "Publishes that JetStream acknowledged as duplicates of a stored Nats-Msg-Id (a success).",
		}),
		BatchFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "jetstream_batch_fallbacks_total",
			Help: "Relay batches JetStream refused as an atomic batch (most often one that repeats a stored Nats-Msg-Id, after a crash) or that failed on the way, sent again message by message.",
		}),
		PublishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "jetstream_publish_errors_total",
			Help: "Publishes that got no acknowledgement; the row stays in the outbox and is sent again.",
		}),
		AuditChecked: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "stream_audit_checks_total",
			Help: "Published messages not yet delivered (no delivery record, or an unsettled one untouched for -audit-after) that the audit looked up in the stream.",
		}),
		StreamLost: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "stream_lost_messages_total",
			Help: "Published messages the stream no longer held (lost by the broker, or expired) before any delivery, published again.",
		}),
		Unserved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "stream_audit_unserved_total",
			Help: "Published requests the audit found waiting (never attempted, or untouched for -audit-after) for a target no running dispatcher delivers to (mcp-front and the dispatcher given different -config files).",
		}, []string{"target"}),
		CommitToAck: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "commit_to_ack_seconds",
			Help:    "Time from the ledger commit of a request to its JetStream acknowledgement.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		LeaseHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "relay_lease_held",
			Help: "1 while this dispatcher holds the relay lease of its database, else 0.",
		}),
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
		ConcurrencyLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "downstream_concurrency_limit",
			Help: "Calls a target may have in flight now, by target: its workers, less after 429s, overload errors or a latency rise, climbing back as calls succeed.",
		}, byTarget),
		ReadAhead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "forwarder_read_ahead_total",
			Help: "Delivery attempts that used the ledger record read in one query with other pulled messages', instead of a read of their own, by target.",
		}, byTarget),
		ConcurrencyWaited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "downstream_concurrency_wait_seconds_total",
			Help: "Time downstream calls spent waiting for a place under the target's concurrency limit or for the end of a pause a 429's Retry-After asked for, by target.",
		}, byTarget),
		Pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "ledger_pruned_total",
			Help: "Settled requests removed from the ledger after their retention.",
		}),
		LedgerRequests: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "ledger_requests",
			Help: "Requests held in the ledger (refreshed by each pruning round).",
		}),
		Writer: newWriter(),
		StreamRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "stream_repairs_total",
			Help: "Repairs of the JetStream stream and consumers made under a running dispatcher, by what was repaired (see the log line of each).",
		}, []string{"what"}),
	}
	for _, k := range StreamRepairKinds {
		d.StreamRepairs.WithLabelValues(k)
	}
	reg.MustRegister(d.Pruned, d.LedgerRequests, d.OutboxBacklog, d.OutboxOldestAge, d.Dispatched, d.DuplicateAcks, d.BatchFallbacks,
		d.PublishErrors, d.AuditChecked, d.StreamLost, d.Unserved, d.CommitToAck, d.LeaseHeld, d.Deliveries, d.DeliveryAttempts,
		d.DeliveryDuration, d.DeadLetters, d.AuthFailures, d.Uncertain, d.RedeliveredSkipped,
		d.ConnectionsOpen, d.ConnectionsOpened, d.RateLimitWaits, d.RateLimitWaited)
	reg.MustRegister(d.ConcurrencyLimit, d.ConcurrencyWaited, d.ReadAhead, d.StreamRepairs)
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

// Cluster exports what a multi-host dispatcher last saw of its
// installation's NATS cluster (the request bucket, the stream and the
// hosts' heartbeats). A collector fills it with Set every few seconds; a
// scrape reads the last view whole, so a series never goes missing
// between two rounds. Every series carries the installation's name;
// host_lost also the host's id (a ledger id) and hostname: one per host
// of the installation within the bucket's TTL.
type Cluster struct {
	mu    sync.Mutex
	state *ClusterState

	available, leader, replicas, lag, bytes, maxBytes, hosts, hostLost *prometheus.Desc
}

// ClusterState is one look at the cluster.
type ClusterState struct {
	Installation string
	// Available: the look got every answer it asked for (stream, bucket,
	// heartbeats). False when the server is unreachable or the meta
	// leader is gone; what was answered is still exported.
	Available bool
	// Replication by resource: "stream" and "bucket". A resource whose
	// information did not come is absent.
	Replication map[string]Replication
	// Bucket size; BucketMaxBytes -1 when unbounded. Meaningful only with
	// HaveBucket.
	HaveBucket     bool
	BucketBytes    uint64
	BucketMaxBytes int64
	// Hosts by state (clusterrec.HostStates), and every host seen; nil
	// when the heartbeats could not be read.
	Hosts    map[string]int
	HostList []ClusterHost
}

// Replication is one replicated resource as its leader reports it.
type Replication struct {
	LeaderKnown bool
	// Peers by state: current (the leader, and followers caught up),
	// lagging (behind the leader), offline (not seen by the group).
	Current, Lagging, Offline int
	// Lag is the largest follower lag, in operations.
	Lag uint64
}

// ClusterHost is one host's entry; Lost when its state is not live.
type ClusterHost struct {
	Host, Hostname string
	Lost           bool
}

// NewCluster creates the multi-host collectors and registers them on reg.
func NewCluster(reg prometheus.Registerer) *Cluster {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "cluster", name), help, append([]string{"installation"}, labels...), nil)
	}
	c := &Cluster{
		available: desc("record_available",
			"1 when the dispatcher's last look at the NATS cluster got every answer (stream, request bucket, heartbeats), else 0: no quorum, no meta leader, or the cluster unreachable; tool calls then fail with a retryable error."),
		leader: desc("leader_known",
			"1 when the resource (stream, bucket) has a leader, else 0: it has lost its quorum and accepts no write.", "resource"),
		replicas: desc("replicas",
			"Replicas of the resource (stream, bucket) by state: current (the leader and caught-up followers), lagging, offline.", "resource", "state"),
		lag: desc("replica_lag",
			"Largest lag of a follower of the resource (stream, bucket) behind its leader, in operations.", "resource"),
		bytes: desc("bucket_bytes",
			"Size of the request bucket; new requests are refused from 90% of its limit (cluster_bucket_max_bytes)."),
		maxBytes: desc("bucket_max_bytes",
			"Size limit of the request bucket (-bucket-max-bytes); -1: none."),
		hosts: desc("hosts",
			"Hosts of the installation in the request bucket's heartbeats, by state: live, silent (no beat for -host-dead-after, not yet adopted), adopting, adopted (another host took over what it left).", "state"),
		hostLost: desc("host_lost",
			"1 for a host that has not beaten for -host-dead-after (silent, adopting or adopted), 0 for a live one; per host id and hostname.", "host", "hostname"),
	}
	reg.MustRegister(c)
	return c
}

// Set replaces the exported view.
func (c *Cluster) Set(s ClusterState) {
	c.mu.Lock()
	c.state = &s
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *Cluster) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.available, c.leader, c.replicas, c.lag, c.bytes, c.maxBytes, c.hosts, c.hostLost} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: nothing before the first Set.
func (c *Cluster) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	s := c.state
	c.mu.Unlock()
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{s.Installation}, labels...)...)
	}
	bit := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge(c.available, bit(s.Available))
	for _, res := range []string{"stream", "bucket"} {
		r, ok := s.Replication[res]
		if !ok {
			continue
		}
		gauge(c.leader, bit(r.LeaderKnown), res)
		gauge(c.replicas, float64(r.Current), res, "current")
		gauge(c.replicas, float64(r.Lagging), res, "lagging")
		gauge(c.replicas, float64(r.Offline), res, "offline")
		gauge(c.lag, float64(r.Lag), res)
	}
	if s.HaveBucket {
		gauge(c.bytes, float64(s.BucketBytes))
		gauge(c.maxBytes, float64(s.BucketMaxBytes))
	}
	if s.Hosts != nil {
		for _, st := range []string{"live", "silent", "adopting", "adopted"} {
			gauge(c.hosts, float64(s.Hosts[st]), st)
		}
		for _, h := range s.HostList {
			gauge(c.hostLost, bit(h.Lost), h.Host, h.Hostname)
		}
	}
}
