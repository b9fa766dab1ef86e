package maintenance

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"ticketrelay/internal/archetype"
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

// PruneStore is the part of the ledger the Pruner uses.
type PruneStore interface {
	// PruneFrom removes up to batch settled requests accepted from from
	// on and before cutoff, and says where the next batch may start.
	PruneFrom(ctx context.Context, from, cutoff time.Time, batch int) (int, time.Time, error)
	// CountRequests counts the requests the ledger holds.
	CountRequests(ctx context.Context) (int64, error)
}

// Pruner removes expired requests in the background.
type Pruner struct {
	cfg     RetentionConfig
	store   PruneStore
	log     *slog.Logger
	metrics *metrics.Dispatcher
	now     func() time.Time
}

// NewPruner validates cfg and returns a pruner; it records into
// arch.Metrics.
func NewPruner(arch archetype.Archetype, cfg RetentionConfig, store PruneStore) (*Pruner, error) {
	arch = arch.WithDefaults()
	m := arch.Metrics
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Read when scraped, not once a round: it follows every accepted request.
	m.LedgerRequests.ReadFrom(func(ctx context.Context) (float64, error) {
		n, err := store.CountRequests(ctx)
		return float64(n), err
	})
	return &Pruner{cfg: cfg, store: store, log: arch.Logger, metrics: m, now: arch.Now}, nil
}

// Run prunes at once and then every Interval until ctx is cancelled; it
// returns nil then.
func (p *Pruner) Run(ctx context.Context) error {
	return Loop{Interval: p.cfg.Interval, Eager: true, RunOnce: p.RunOnce, Log: p.log, Failed: "pruning expired requests"}.Run(ctx)
}

// RunOnce removes every expired request, one batch per transaction, and
// yields to other writers between batches.
func (p *Pruner) RunOnce(ctx context.Context) error {
	cutoff := p.now().Add(-p.cfg.Keep)
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
		n, from, err = p.store.PruneFrom(ctx, from, cutoff, p.cfg.Batch)
		total += n
		p.metrics.Pruned.Add(float64(n))
		if err != nil || n < p.cfg.Batch {
			return err
		}
	}
	return nil
}
