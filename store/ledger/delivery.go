package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"ticketrelay/request"
)

// Delivery reads the delivery record of requestID.
func (l *Ledger) Delivery(ctx context.Context, requestID string) (request.Delivery, bool, error) {
	p, err := l.PriorDelivery(ctx, requestID)
	return p.Delivery, p.Found, err
}

// RecordDelivery writes d durably if the record is still at d.Version (0:
// none yet), making it d.Version+1; UpdatedAt is set to now. Otherwise it
// writes nothing and returns ErrStale. One exception: a delivery is a fact,
// so a delivered record replaces any record that is not delivered already,
// whatever its version.
func (l *Ledger) RecordDelivery(ctx context.Context, d request.Delivery) error {
	return recordErr(d, l.w.InTx(ctx, l.recordTx(d)))
}

// RecordDeliveryThen is RecordDelivery without the wait: it returns once the
// write is queued, and then hears RecordDelivery's answer once the record is
// durable (see Writer.InTxThen: then runs on the writer goroutine).
func (l *Ledger) RecordDeliveryThen(ctx context.Context, d request.Delivery, then func(error)) error {
	err := l.w.InTxThen(ctx, l.recordTx(d), func(err error) { then(recordErr(d, err)) })
	return recordErr(d, err)
}

// MirrorDelivery copies d, a delivery record another store decided (the
// cluster record of a multi-host installation), into this ledger if it
// holds the request: whatever the local version, except that a delivered
// record stays delivered. It keeps the host's own views (dispatcher
// status, retention) true; it decides nothing.
func (l *Ledger) MirrorDelivery(ctx context.Context, d request.Delivery) error {
	err := l.w.InTx(ctx, l.writeTx(d, true))
	if errors.Is(err, request.ErrNotFound) || errors.Is(err, request.ErrStale) {
		return nil
	}
	return recordErr(d, err)
}

func (l *Ledger) recordTx(d request.Delivery) func(ctx context.Context, tx *sql.Tx) error {
	return l.writeTx(d, false)
}

// writeTx writes d: if the record is at d.Version (a mirror: at any
// version), or d is a delivery of a record not yet delivered.
func (l *Ledger) writeTx(d request.Delivery, mirror bool) func(ctx context.Context, tx *sql.Tx) error {
	var next any
	if !d.NextAttemptAt.IsZero() {
		next = d.NextAttemptAt.UnixNano()
	}
	return func(ctx context.Context, tx *sql.Tx) error {
		// The record takes the ledger row's id (see migration 5); a request
		// the ledger does not hold gets none.
		res, err := l.w.Prepared(tx).ExecContext(ctx, `
			INSERT INTO deliveries (id, target, state, attempts, throttled, next_attempt_at, last_error, failure, external_id, external_url, updated_at, version)
			SELECT id, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1 FROM requests WHERE request_id = ?
			ON CONFLICT(id) DO UPDATE SET
				target = excluded.target, state = excluded.state, attempts = excluded.attempts, throttled = excluded.throttled,
				next_attempt_at = excluded.next_attempt_at, last_error = excluded.last_error, failure = excluded.failure,
				external_id = excluded.external_id, external_url = excluded.external_url,
				updated_at = excluded.updated_at, version = deliveries.version + 1
			WHERE (deliveries.version = ? OR ?) AND (deliveries.state != 'delivered' OR ?)
				OR (excluded.state = 'delivered' AND deliveries.state != 'delivered')`,
			d.Target, d.State, d.Attempts, d.Throttled, next, d.LastError, string(d.Failure), d.ExternalID, d.ExternalURL, l.now().UnixNano(), d.RequestID,
			d.Version, mirror, !mirror)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			if err == nil && d.Attempt != nil {
				err = l.recordAttemptTx(ctx, tx, d)
			}
			if err == nil {
				err = l.unparkTx(ctx, tx, d.RequestID, d.State) // waiting.go
			}
			return err
		}
		if ok, err := holds(ctx, tx, d.RequestID); err != nil || !ok {
			return cmp.Or(err, request.ErrNotFound)
		}
		return request.ErrStale
	}
}

// holds reports whether the ledger holds requestID (accepted, and not
// pruned).
func holds(ctx context.Context, tx *sql.Tx, requestID string) (bool, error) {
	var ok bool
	err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM requests WHERE request_id = ?)`, requestID).Scan(&ok)
	return ok, err
}

func recordErr(d request.Delivery, err error) error {
	if err != nil {
		return fmt.Errorf("ledger: record delivery %s: %w", d.RequestID, err)
	}
	return nil
}
