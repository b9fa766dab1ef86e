package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/outbox"
)

// pruneQuery picks the oldest settled requests. CROSS JOIN keeps requests
// the outer loop, so SQLite walks requests_created from the oldest row and
// stops at the cutoff or the batch; with a plain JOIN it drove from the
// deliveries_state index instead, read every settled record and sorted them,
// all inside the write transaction mcp-front waits on, even with nothing to
// prune. It starts at a position (created_at): requests older than the
// cutoff that never settle (uncertain ones, ones no dispatcher serves) are
// walked past once per run, not once per batch (decision 0088 has the
// measurements).
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
			fromNS, cutoff.UnixNano(), string(request.StatusDelivered), string(request.StatusFailed), batch)
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
		if err := outbox.DeleteTx(ctx, tx, string(list)); err != nil {
			return err
		}
		for _, table := range []string{"attempts", "deliveries", "requests"} {
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

// CountRequests counts the requests the ledger holds (the retention's
// gauge).
func (l *Ledger) CountRequests(ctx context.Context) (int64, error) {
	var n int64
	if err := l.db.Reader().QueryRowContext(ctx, `SELECT count(*) FROM requests`).Scan(&n); err != nil {
		return 0, fmt.Errorf("ledger: count requests: %w", err)
	}
	return n, nil
}
