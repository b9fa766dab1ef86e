package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"ticketrelay/metrics"
)

// MinRetention is the shortest allowed ledger retention: the ~30 minutes in
// which Claude Code may still retry a call (reconnect backoff) must always be
// covered, or a late retry would create a second ticket.
const MinRetention = 30 * time.Minute

// RetentionConfig says how long settled requests are remembered.
type RetentionConfig struct {
	// Keep is how long a request is remembered after it was accepted, once its
	// delivery is settled (delivered or failed). A request id reused after
	// that is a new request. Requests not yet settled, and uncertain ones,
	// are never removed. Default 24h; at least MinRetention.
	Keep time.Duration
	// Batch is how many requests one transaction removes, so that pruning
	// never holds the write lock for long. Default 500.
	Batch int
	// Interval between pruning rounds. Default 1m.
	Interval time.Duration
}

// WithDefaults fills zero fields.
func (c RetentionConfig) WithDefaults() RetentionConfig {
	c.Keep = cmp.Or(c.Keep, 24*time.Hour)
	c.Batch = cmp.Or(c.Batch, 500)
	c.Interval = cmp.Or(c.Interval, time.Minute)
	return c
}

// Validate checks the retention against the client retry horizon.
func (c RetentionConfig) Validate() error {
	if c.Keep < MinRetention {
		return fmt.Errorf("ledger: retention %s is shorter than the %s in which MCP clients may retry", c.Keep, MinRetention)
	}
	if c.Batch < 1 || c.Interval <= 0 {
		return fmt.Errorf("ledger: invalid retention config %+v", c)
	}
	return nil
}

// pruneQuery picks the oldest settled requests. CROSS JOIN keeps requests
// the outer loop, so SQLite walks requests_created from the oldest row and
// stops at the cutoff or the batch; with a plain JOIN it drove from the
// deliveries_state index instead, read every settled record and sorted them
// (0.5 s per run on a 940,000-row ledger with nothing to prune, inside the
// write transaction mcp-front waits on; ~0.1 ms this way). It starts at a
// position (created_at): requests older than the cutoff that never settle
// (uncertain ones, ones no dispatcher serves) are walked past once per run,
// not once per batch (200,000 of them: 117 ms a walk).
const pruneQuery = `
	SELECT r.id, r.created_at FROM requests r CROSS JOIN deliveries d ON d.id = r.id
	WHERE r.created_at >= ? AND r.created_at < ? AND d.state IN (?, ?)
	ORDER BY r.created_at LIMIT ?`

// Prune removes up to batch settled requests accepted before cutoff (the
// ledger row holds the ticket), with their outbox row and delivery record, in one transaction. It
// returns how many requests it removed.
func (l *Ledger) Prune(ctx context.Context, cutoff time.Time, batch int) (int, error) {
	n, _, err := l.PruneFrom(ctx, time.Time{}, cutoff, batch)
	return n, err
}

// PruneFrom is Prune for requests accepted at from or later. It also
// returns where the next batch of the same run may start: the acceptance
// time of the newest request it removed (every settled request before it
// is gone), or from if it removed none.
func (l *Ledger) PruneFrom(ctx context.Context, from, cutoff time.Time, batch int) (int, time.Time, error) {
	var n int
	next := from
	var fromNS int64
	if !from.IsZero() {
		fromNS = from.UnixNano()
	}
	err := l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		n, next = 0, from
		rows, err := tx.QueryContext(ctx, pruneQuery,
			fromNS, cutoff.UnixNano(), string(StatusDelivered), string(StatusFailed), batch)
		if err != nil {
			return err
		}
		var ids []int64
		for rows.Next() {
			var id, created int64
			if err := rows.Scan(&id, &created); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
			next = time.Unix(0, created)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		list, err := json.Marshal(ids)
		if err != nil {
			return err
		}
		// The outbox row and the delivery record share the ledger row's id.
		for _, table := range []string{"outbox", "deliveries", "requests"} {
			if _, err := tx.ExecContext(ctx,
				`DELETE FROM `+table+` WHERE id IN (SELECT value FROM json_each(?))`, string(list)); err != nil {
				return fmt.Errorf("prune %s: %w", table, err)
			}
		}
		n = len(ids)
		return nil
	})
	if err != nil {
		return 0, from, fmt.Errorf("ledger: prune: %w", err)
	}
	return n, next, nil
}

// Pruner removes expired requests in the background.
type Pruner struct {
	cfg     RetentionConfig
	ledger  *Ledger
	log     *slog.Logger
	metrics *metrics.Dispatcher
}

// NewPruner validates cfg and returns a pruner.
func NewPruner(cfg RetentionConfig, l *Ledger, log *slog.Logger, m *metrics.Dispatcher) (*Pruner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m.LedgerRequests.ReadFrom(l.countRequests) // read when scraped, not once a round: it follows every accepted request
	return &Pruner{cfg: cfg, ledger: l, log: log, metrics: m}, nil
}

// countRequests is the number of requests the ledger holds.
func (l *Ledger) countRequests(ctx context.Context) (float64, error) {
	var n int64
	err := l.db.read.QueryRowContext(ctx, `SELECT count(*) FROM requests`).Scan(&n)
	return float64(n), err
}

// Run prunes every Interval until ctx is cancelled; it returns nil then.
func (p *Pruner) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		if err := p.RunOnce(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("pruning expired requests", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce removes every expired request, one batch per transaction, and
// yields to other writers between batches.
func (p *Pruner) RunOnce(ctx context.Context) error {
	cutoff := p.ledger.now().Add(-p.cfg.Keep)
	total := 0
	defer func() {
		if total > 0 {
			p.log.Info("pruned expired requests", "count", total, "accepted_before", cutoff)
		}
	}()
	var from time.Time
	for ctx.Err() == nil {
		var n int
		var err error
		n, from, err = p.ledger.PruneFrom(ctx, from, cutoff, p.cfg.Batch)
		total += n
		p.metrics.Pruned.Add(float64(n))
		if err != nil || n < p.cfg.Batch {
			return err
		}
	}
	return nil
}
