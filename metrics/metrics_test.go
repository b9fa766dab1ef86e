package metrics_test

import (
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
