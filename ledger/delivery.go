package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Delivery is the forwarder's record of a request's delivery.
type Delivery struct {
	RequestID     string
	Target        string
	State         string // DeliveryAttempting or a Status: delivered, retrying, failed, uncertain
	Attempts      int
	Throttled     int // of Attempts, calls the downstream refused for its rate limit
	NextAttemptAt time.Time
	LastError     string
	Failure       Failure // why a failed delivery failed; "" otherwise
	ExternalID    string
	ExternalURL   string
	UpdatedAt     time.Time
	// Attempt is the downstream call this write ends, kept in the
	// request's attempts history (Attempts); nil: the write ends no call.
	Attempt *Attempt
	// Version is the record's version as read; 0: there is no record yet.
	// Each write makes it one higher (see RecordDelivery).
	Version int64
}

// Counted is how many of the attempts count toward the attempt limit: those
// the downstream did not refuse for its rate limit.
func (d Delivery) Counted() int { return d.Attempts - d.Throttled }

// Settled reports whether the delivery needs no further call downstream.
func (d Delivery) Settled() bool {
	switch Status(d.State) {
	case StatusDelivered, StatusFailed, StatusUncertain:
		return true
	}
	return false
}

// Delivery reads the delivery record of requestID.
func (l *Ledger) Delivery(ctx context.Context, requestID string) (Delivery, bool, error) {
	p, err := l.PriorDelivery(ctx, requestID)
	return p.Delivery, p.Found, err
}

// ErrStale: the delivery record is no longer at the version the writer read;
// another copy of the message (or an operator) changed it first, and the
// write was not made.
var ErrStale = errors.New("ledger: the delivery record changed since it was read")

// RecordDelivery writes d durably if the record is still at d.Version (0:
// none yet), making it d.Version+1; UpdatedAt is set to now. Otherwise it
// writes nothing and returns ErrStale. One exception: a delivery is a fact,
// so a delivered record replaces any record that is not delivered already,
// whatever its version.
func (l *Ledger) RecordDelivery(ctx context.Context, d Delivery) error {
	return recordErr(d, l.w.InTx(ctx, l.recordTx(d)))
}

// RecordDeliveryThen is RecordDelivery without the wait: it returns once the
// write is queued, and then hears RecordDelivery's answer once the record is
// durable (see Writer.InTxThen: then runs on the writer goroutine).
func (l *Ledger) RecordDeliveryThen(ctx context.Context, d Delivery, then func(error)) error {
	err := l.w.InTxThen(ctx, l.recordTx(d), func(err error) { then(recordErr(d, err)) })
	return recordErr(d, err)
}

// MirrorDelivery copies d, a delivery record another store decided (the
// cluster record of a multi-host installation), into this ledger if it
// holds the request: whatever the local version, except that a delivered
// record stays delivered. It keeps the host's own views (dispatcher
// status, retention) true; it decides nothing.
func (l *Ledger) MirrorDelivery(ctx context.Context, d Delivery) error {
	err := l.w.InTx(ctx, l.writeTx(d, true))
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale) {
		return nil
	}
	return recordErr(d, err)
}

func (l *Ledger) recordTx(d Delivery) func(ctx context.Context, tx *sql.Tx) error {
	return l.writeTx(d, false)
}

// writeTx writes d: if the record is at d.Version (a mirror: at any
// version), or d is a delivery of a record not yet delivered.
func (l *Ledger) writeTx(d Delivery, mirror bool) func(ctx context.Context, tx *sql.Tx) error {
	var next any
	if !d.NextAttemptAt.IsZero() {
		next = d.NextAttemptAt.UnixNano()
	}
	return func(ctx context.Context, tx *sql.Tx) error {
		// The record takes the ledger row's id (see migration 5); a request
		// the ledger does not hold gets none.
		res, err := l.w.prepared(tx).ExecContext(ctx, `
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
			return err
		}
		if ok, err := holds(ctx, tx, d.RequestID); err != nil || !ok {
			return cmp.Or(err, ErrNotFound)
		}
		return ErrStale
	}
}

// holds reports whether the ledger holds requestID (accepted, and not
// pruned).
func holds(ctx context.Context, tx *sql.Tx, requestID string) (bool, error) {
	var ok bool
	err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM requests WHERE request_id = ?)`, requestID).Scan(&ok)
	return ok, err
}

func recordErr(d Delivery, err error) error {
	if err != nil {
		return fmt.Errorf("ledger: record delivery %s: %w", d.RequestID, err)
	}
	return nil
}
