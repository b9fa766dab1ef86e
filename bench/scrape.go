package bench

import (
	"fmt"
	"time"

	"ticketrelay/testkit/e2eproc"
)

// The histograms the report reads from the servers' /metrics.
const (
	commitSeconds  = "ticketrelay_sqlite_commit_duration_seconds"
	commitBatch    = "ticketrelay_sqlite_commit_batch_size"
	deliverSeconds = "ticketrelay_delivery_duration_seconds"

	connsOpened      = "ticketrelay_downstream_connections_opened_total"
	deliveryAttempts = "ticketrelay_delivery_attempts_total"
	readAhead        = "ticketrelay_forwarder_read_ahead_total"
	concurrencyLimit = "ticketrelay_downstream_concurrency_limit"
	mallocs          = "go_memstats_mallocs_total" // Go's heap allocations since the process started
)

// scrape reads the Prometheus page at http://addr/metrics.
func scrape(addr string) (e2eproc.Metrics, error) {
	m, err := e2eproc.Scrape(addr)
	if err != nil {
		return nil, fmt.Errorf("bench: scrape %s: %w", addr, err)
	}
	return m, nil
}

// meanOf is the mean of a histogram (in seconds) as a duration.
func meanOf(m e2eproc.Metrics, histogram string) string {
	sum, n := m.Histogram(histogram)
	if n == 0 {
		return "n/a"
	}
	return ms(time.Duration(sum / n * float64(time.Second)))
}

// opsPerCommit is the mean SQLite group-commit batch.
func opsPerCommit(m e2eproc.Metrics) float64 { return ratio(m.Histogram(commitBatch)) }

// commitTally sums the group commits of measured windows: each window is
// bracketed by a scrape before and after it.
type commitTally struct{ ops, commits, secs float64 }

func (t *commitTally) add(before, after e2eproc.Metrics) {
	ops0, commits0 := before.Histogram(commitBatch)
	ops1, commits1 := after.Histogram(commitBatch)
	secs0, _ := before.Histogram(commitSeconds)
	secs1, _ := after.Histogram(commitSeconds)
	t.ops, t.commits, t.secs = t.ops+ops1-ops0, t.commits+commits1-commits0, t.secs+secs1-secs0
}

// opsPerCommit is the windows' mean batch, and meanCommit their mean
// transaction.
func (t commitTally) opsPerCommit() float64 { return ratio(t.ops, t.commits) }
func (t commitTally) meanCommit() time.Duration {
	return time.Duration(ratio(t.secs, t.commits) * float64(time.Second))
}
