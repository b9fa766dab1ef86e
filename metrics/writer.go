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
		BatchSize: newHistogram("sqlite_commit_batch_size",
			"Operations committed together in one SQLite transaction (group commit).",
			[]float64{1, 2, 4, 8, 16, 32, 64, 128, 256}),
		CommitDuration: newHistogram("sqlite_commit_duration_seconds",
			"Time from BEGIN to a durable COMMIT of one group-commit batch.",
			sqliteSeconds),
		CommitErrors: newCounter("sqlite_commit_errors_total",
			"Group-commit batches whose transaction failed as a whole."),
		CheckpointDuration: newHistogram("sqlite_checkpoint_duration_seconds",
			"Time of one background WAL checkpoint (PASSIVE) of this process.",
			sqliteSeconds),
		WALPendingFrames: newGauge("sqlite_wal_pending_frames",
			"WAL frames not yet copied into the database file after this process's last checkpoint; grows while a reader holds an old snapshot."),
	}
}

func (w *Writer) register(reg prometheus.Registerer) {
	reg.MustRegister(w.BatchSize, w.CommitDuration, w.CommitErrors, w.CheckpointDuration, w.WALPendingFrames)
}
