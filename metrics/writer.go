package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Writer holds the collectors of the group-commit writer (both processes).
type Writer struct {
	BatchSize          prometheus.Histogram
	CommitDuration     prometheus.Histogram
	CommitErrors       prometheus.Counter
	CheckpointDuration prometheus.Histogram
	WALPendingFrames   prometheus.Gauge
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
