package ledger

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"time"

	"ticketrelay/metrics"
)

// Checkpoints copy committed WAL frames into the database file. SQLite runs
// one inside the commit that takes the WAL past wal_autocheckpoint pages,
// and there it held up the writer goroutine, so every caller of that batch
// and of the batches queued behind it. On a large ledger a checkpoint writes
// random pages of a large file and fsyncs it. With checkpoints on a
// connection of their own once a second, make bench's A/B (32 sessions,
// alternated) measured 1.09–1.10× create_ticket throughput on a million
// rows (p99 0.72–0.83×) and 1.04–1.05× on an empty ledger, at the same CPU
// per call.
const (
	// checkpointEvery is the pause between two checkpoints. Every 100 ms
	// gained as much on a large ledger, but its fsyncs, beside the commits'
	// of both processes, raised scenario 5's lag p99 from ~36 to ~46 ms
	// (once a second: ~42, within the noise; four alternated runs each).
	// A checkpoint with nothing to copy reads the WAL index and returns.
	checkpointEvery = time.Second
	// autoCheckpointPages is the write connections' wal_autocheckpoint: a
	// backstop for a checkpointer that falls behind (~40 MB of WAL), not
	// the normal path (~6,000 pages arrive in a second at 5,000 creates/s).
	autoCheckpointPages = 10000
)

// checkpointer runs PASSIVE checkpoints on the DB's checkpoint connection
// until stopped. PASSIVE never waits: it copies what no reader still needs,
// and a checkpoint of the other process holding the lock makes it skip a
// turn. SQLite restarts the WAL from its start at the first write after a
// checkpoint that copied everything.
type checkpointer struct {
	db      *sql.DB
	log     *slog.Logger
	metrics *metrics.Writer
	stop    chan struct{}
	stopped sync.Once
	done    chan struct{}
}

func startCheckpointer(db *sql.DB, log *slog.Logger, m *metrics.Writer) *checkpointer {
	c := &checkpointer{db: db, log: log, metrics: m, stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c
}

func (c *checkpointer) loop() {
	defer close(c.done)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	var lastWarn time.Time
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if err := c.checkpoint(); err != nil && time.Since(lastWarn) >= time.Minute {
			// The backstop keeps the WAL bounded meanwhile.
			c.log.Warn("ledger: WAL checkpoint failed; commits checkpoint past the backstop", "err", err, "backstop_pages", autoCheckpointPages)
			lastWarn = time.Now()
		}
	}
}

// checkpoint runs one PASSIVE checkpoint and records what is left to copy.
func (c *checkpointer) checkpoint() error {
	start := time.Now()
	var busy, frames, copied int64
	err := c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
	if err != nil {
		return err
	}
	c.metrics.CheckpointDuration.Observe(time.Since(start).Seconds())
	if busy == 0 && frames >= 0 && copied >= 0 {
		c.metrics.WALPendingFrames.Set(float64(frames - copied))
	}
	return nil
}

// close stops the loop and waits for it. It may be called again.
func (c *checkpointer) close() {
	c.stopped.Do(func() { close(c.stop) })
	<-c.done
}
