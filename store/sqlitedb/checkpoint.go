package sqlitedb

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
// random pages of a large file and fsyncs it. Checkpoints on a connection
// of their own once a second take that off the writer: more create_ticket
// throughput and a lower tail, most on a large ledger, at the same CPU per
// call (decision 0070 has the measurements).
const (
	// checkpointEvery is the pause between two checkpoints. Every 100 ms
	// gained as much on a large ledger, but its fsyncs, beside the commits'
	// of both processes, raised the delivery lag's tail; once a second did
	// not beyond the noise (decision 0070 has the measurements).
	// A checkpoint with nothing to copy reads the WAL index and returns.
	checkpointEvery = time.Second
	// autoCheckpointPages is the write connections' wal_autocheckpoint: a
	// backstop for a checkpointer that falls behind (10,000 pages of 4 KiB,
	// ~40 MB of WAL), not the normal path: a second's commits at full load
	// stay below it (decision 0070).
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
			c.log.Warn("WAL checkpoint failed; commits checkpoint past the backstop", "err", err, "backstop_pages", autoCheckpointPages)
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
