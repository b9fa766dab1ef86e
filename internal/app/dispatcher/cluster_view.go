package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
	"ticketrelay/internal/maintenance"
	"ticketrelay/internal/operate"
	"ticketrelay/metrics"
	"ticketrelay/store/clusterrec"
)

// clusterWatch exports the view every `every` until ctx ends.
type clusterWatch struct {
	js        jetstream.JetStream
	store     *clusterrec.Store
	inst      installation.Name
	deadAfter time.Duration
	every     time.Duration
	m         *metrics.Cluster
	log       *slog.Logger
	now       func() time.Time
	lastErrs  int // questions the last look left unanswered
}

// Run looks at once, then every `every`, until ctx ends.
func (w *clusterWatch) Run(ctx context.Context) error {
	return maintenance.Loop{Interval: w.every, Eager: true, RunOnce: w.look, Log: w.log}.Run(ctx)
}

// look exports the view once. It says when the view breaks and when it
// mends, not every round, so it returns no error for the Loop to log.
func (w *clusterWatch) look(ctx context.Context) error {
	v := operate.LookAtCluster(ctx, w.js, w.store, w.inst, w.deadAfter, w.now())
	if ctx.Err() != nil {
		return nil
	}
	w.m.Set(v.MetricsState())
	if n := len(v.Errors); (n > 0) != (w.lastErrs > 0) {
		if n > 0 {
			w.log.Warn("cluster: the request bucket or the stream does not answer", "err", errors.New(v.Errors[0]), "questions_unanswered", n)
		} else {
			w.log.Info("cluster: the request bucket and the stream answer again")
		}
		w.lastErrs = n
	}
	return nil
}

// clusterWatchEvery is how often the dispatcher looks at the cluster for
// its metrics: a few times per -host-dead-after, so a lost host shows
// soon after the others start adopting it, and at most every 10 s (a
// scrape interval) since each look costs a few requests to the leaders.
func clusterWatchEvery(deadAfter time.Duration) time.Duration {
	return min(10*time.Second, max(time.Second, deadAfter/3))
}
