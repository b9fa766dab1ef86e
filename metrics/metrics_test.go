package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/metrics"
)

// TestDispatcherInitExportsEveryTargetSeriesAtZero: after Init, the
// counters the alerts read have a series at 0 for every served target (and
// every delivery outcome) before anything happened, so that the first event
// is an increase; a target not served gets none.
func TestDispatcherInitExportsEveryTargetSeriesAtZero(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	d := metrics.NewDispatcher(reg)
	d.Init([]string{"local", "ops-hook"})

	perTarget := map[string]*prometheus.CounterVec{
		"ticketrelay_dispatched_total":           d.Dispatched,
		"ticketrelay_delivery_attempts_total":    d.DeliveryAttempts,
		"ticketrelay_dead_letters_total":         d.DeadLetters,
		"ticketrelay_auth_failures_total":        d.AuthFailures,
		"ticketrelay_uncertain_requests_total":   d.Uncertain,
		"ticketrelay_redeliveries_skipped_total": d.RedeliveredSkipped,
	}
	for name, vec := range perTarget {
		if n := testutil.CollectAndCount(vec, name); n != 2 {
			t.Errorf("%s: %d series after Init of 2 targets, want 2", name, n)
		}
		for _, target := range []string{"local", "ops-hook"} {
			if v := testutil.ToFloat64(vec.WithLabelValues(target)); v != 0 {
				t.Errorf("%s{target=%q} = %v after Init, want 0", name, target, v)
			}
		}
	}
	if n := testutil.CollectAndCount(d.Deliveries, "ticketrelay_deliveries_total"); n != 2*4 {
		t.Errorf("deliveries_total: %d series after Init of 2 targets, want 8 (4 outcomes each)", n)
	}
	if n := testutil.CollectAndCount(d.DeliveryDuration, "ticketrelay_delivery_duration_seconds"); n != 2 {
		t.Errorf("delivery_duration_seconds: %d series after Init of 2 targets, want 2", n)
	}
	for _, o := range []string{metrics.OutcomeDelivered, metrics.OutcomeRetrying, metrics.OutcomeFailed, metrics.OutcomeUncertain} {
		if v := testutil.ToFloat64(d.Deliveries.WithLabelValues("ops-hook", o)); v != 0 {
			t.Errorf("deliveries_total{target=ops-hook,outcome=%s} = %v, want 0", o, v)
		}
	}

	// The exposition holds the zero series, and nothing for other targets.
	d.DeadLetters.WithLabelValues("ops-hook").Inc()
	want := `
# HELP ticketrelay_dead_letters_total Requests that ended failed (permanent error or attempts exhausted), by target.
# TYPE ticketrelay_dead_letters_total counter
ticketrelay_dead_letters_total{target="local"} 0
ticketrelay_dead_letters_total{target="ops-hook"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ticketrelay_dead_letters_total"); err != nil {
		t.Error(err)
	}
	// The audit's unserved targets are unknown in advance: no series.
	if n := testutil.CollectAndCount(d.Unserved); n != 0 {
		t.Errorf("stream_audit_unserved_total: %d series after Init, want 0", n)
	}
}

// TestClusterExportsTheLastView: nothing before the first look; then
// exactly the last view, every host state at a value (0 included), and a
// resource or the hosts that did not answer left out rather than shown
// at 0.
func TestClusterExportsTheLastView(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := metrics.NewCluster(reg)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("before the first look: %d series (%v); want none", n, err)
	}
	c.Set(metrics.ClusterState{
		Installation: "demo", Available: true,
		Replication: map[string]metrics.Replication{
			"stream": {LeaderKnown: true, Current: 3},
			"bucket": {LeaderKnown: true, Current: 2, Lagging: 1, Lag: 42},
		},
		HaveBucket: true, BucketBytes: 750, BucketMaxBytes: 1000,
		Hosts:    map[string]int{"live": 1, "adopted": 1},
		HostList: []metrics.ClusterHost{{Host: "aa", Hostname: "h1"}, {Host: "bb", Hostname: "h2", Lost: true}},
	})
	want := `
# HELP ticketrelay_cluster_bucket_bytes Size of the request bucket; new requests are refused from 90% of its limit (cluster_bucket_max_bytes).
# TYPE ticketrelay_cluster_bucket_bytes gauge
ticketrelay_cluster_bucket_bytes{installation="demo"} 750
# HELP ticketrelay_cluster_bucket_max_bytes Size limit of the request bucket (-bucket-max-bytes); -1: none.
# TYPE ticketrelay_cluster_bucket_max_bytes gauge
ticketrelay_cluster_bucket_max_bytes{installation="demo"} 1000
# HELP ticketrelay_cluster_host_lost 1 for a host that has not beaten for -host-dead-after (silent, adopting or adopted), 0 for a live one; per host id and hostname.
# TYPE ticketrelay_cluster_host_lost gauge
ticketrelay_cluster_host_lost{host="aa",hostname="h1",installation="demo"} 0
ticketrelay_cluster_host_lost{host="bb",hostname="h2",installation="demo"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ticketrelay_cluster_bucket_bytes",
		"ticketrelay_cluster_bucket_max_bytes", "ticketrelay_cluster_host_lost"); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() != "installation" {
					key += " " + l.GetName() + "=" + l.GetValue()
				}
			}
			got[key] = m.GetGauge().GetValue()
		}
	}
	for key, v := range map[string]float64{
		"ticketrelay_cluster_record_available":                       1,
		"ticketrelay_cluster_leader_known resource=bucket":           1,
		"ticketrelay_cluster_replicas resource=bucket state=lagging": 1,
		"ticketrelay_cluster_replicas resource=bucket state=current": 2,
		"ticketrelay_cluster_replicas resource=stream state=offline": 0,
		"ticketrelay_cluster_replica_lag resource=bucket":            42,
		"ticketrelay_cluster_hosts state=silent":                     0,
		"ticketrelay_cluster_hosts state=adopted":                    1,
	} {
		if g, ok := got[key]; !ok || g != v {
			t.Errorf("%s = %v (present %v); want %v", key, g, ok, v)
		}
	}

	// The cluster stops answering: what did not answer is gone, not 0.
	c.Set(metrics.ClusterState{Installation: "demo", Available: false,
		Replication: map[string]metrics.Replication{"stream": {LeaderKnown: false, Offline: 2, Current: 1}}})
	want = `
# HELP ticketrelay_cluster_leader_known 1 when the resource (stream, bucket) has a leader, else 0: it has lost its quorum and accepts no write.
# TYPE ticketrelay_cluster_leader_known gauge
ticketrelay_cluster_leader_known{installation="demo",resource="stream"} 0
# HELP ticketrelay_cluster_record_available 1 when the dispatcher's last look at the NATS cluster got every answer (stream, request bucket, heartbeats), else 0: no quorum, no meta leader, or the cluster unreachable; tool calls then fail with a retryable error.
# TYPE ticketrelay_cluster_record_available gauge
ticketrelay_cluster_record_available{installation="demo"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ticketrelay_cluster_leader_known",
		"ticketrelay_cluster_record_available", "ticketrelay_cluster_hosts", "ticketrelay_cluster_bucket_bytes",
		"ticketrelay_cluster_host_lost"); err != nil {
		t.Error(err)
	}
}

// TestReadGaugeReadsWhenScraped: ledger_requests shows what its function
// reads at each scrape; a read that fails leaves the last value read.
func TestReadGaugeReadsWhenScraped(t *testing.T) {
	d := metrics.NewDispatcher(prometheus.NewPedanticRegistry())
	if got := testutil.ToFloat64(d.LedgerRequests); got != 0 {
		t.Fatalf("ledger_requests %v before anything is read, want 0", got)
	}
	n, fail := 0.0, false
	d.LedgerRequests.ReadFrom(func(context.Context) (float64, error) {
		if fail {
			return 0, errors.New("database is locked")
		}
		n++
		return n, nil
	})
	for want := 1.0; want <= 3; want++ {
		if got := testutil.ToFloat64(d.LedgerRequests); got != want {
			t.Fatalf("scrape %v: ledger_requests %v, want %v", want, got, want)
		}
	}
	fail = true
	if got := testutil.ToFloat64(d.LedgerRequests); got != 3 {
		t.Fatalf("after a failed read: ledger_requests %v, want the last value read, 3", got)
	}
}
