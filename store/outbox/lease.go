package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Lease is a row in the leases table that at most one holder owns until it
// expires. The relay holds the "relay" lease so that only one dispatcher
// publishes a database's outbox.
type Lease struct {
	Name   string
	Holder string
	TTL    time.Duration
	Tx     TxRunner
	Now    func() time.Time
	// Dead, if set, is a holder known to have died (the dispatcher that
	// ran before this one on the same data directory: its lock was free).
	// Its lease is taken at once instead of waited out.
	Dead string
}

// Acquire takes or renews the lease; it reports whether this holder owns it.
func (l *Lease) Acquire(ctx context.Context) (bool, error) {
	var held bool
	err := l.Tx.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := l.Now()
		res, err := tx.ExecContext(ctx, `
			INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)
			ON CONFLICT(name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
			WHERE leases.holder = excluded.holder OR leases.expires_at < ? OR leases.holder = ?`,
			l.Name, l.Holder, now.Add(l.TTL).UnixNano(), now.UnixNano(), sql.NullString{String: l.Dead, Valid: l.Dead != ""})
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		held = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("outbox: acquire lease %s: %w", l.Name, err)
	}
	return held, nil
}

// Release gives the lease up if this holder owns it.
func (l *Lease) Release(ctx context.Context) error {
	err := l.Tx.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM leases WHERE name = ? AND holder = ?`, l.Name, l.Holder)
		return err
	})
	if err != nil {
		return fmt.Errorf("outbox: release lease %s: %w", l.Name, err)
	}
	return nil
}
