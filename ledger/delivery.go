package ledger

import (
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
	NextAttemptAt time.Time
	LastError     string
	ExternalID    string
	ExternalURL   string
	UpdatedAt     time.Time
}

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
	d := Delivery{RequestID: requestID}
	var next sql.NullInt64
	var updated int64
	err := l.db.read.QueryRowContext(ctx, `
		SELECT target, state, attempts, next_attempt_at, last_error, external_id, external_url, updated_at
		FROM deliveries WHERE request_id = ?`, requestID).
		Scan(&d.Target, &d.State, &d.Attempts, &next, &d.LastError, &d.ExternalID, &d.ExternalURL, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("ledger: read delivery %s: %w", requestID, err)
	}
	if next.Valid {
		d.NextAttemptAt = time.Unix(0, next.Int64).UTC()
	}
	d.UpdatedAt = time.Unix(0, updated).UTC()
	return d, true, nil
}

// RecordDelivery writes d durably (insert or replace). UpdatedAt is set to now.
func (l *Ledger) RecordDelivery(ctx context.Context, d Delivery) error {
	var next any
	if !d.NextAttemptAt.IsZero() {
		next = d.NextAttemptAt.UnixNano()
	}
	err := l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO deliveries (request_id, target, state, attempts, next_attempt_at, last_error, external_id, external_url, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT(request_id) DO UPDATE SET
				target = excluded.target, state = excluded.state, attempts = excluded.attempts,
				next_attempt_at = excluded.next_attempt_at, last_error = excluded.last_error,
				external_id = excluded.external_id, external_url = excluded.external_url,
				updated_at = excluded.updated_at`,
			d.RequestID, d.Target, d.State, d.Attempts, next, d.LastError, d.ExternalID, d.ExternalURL, l.now().UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("ledger: record delivery %s: %w", d.RequestID, err)
	}
	return nil
}
