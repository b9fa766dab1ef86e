package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"ticketrelay/ticket"
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
	p, err := l.PriorDelivery(ctx, requestID)
	return p.Delivery, p.Found, err
}

// Prior is what the forwarder reads before an attempt.
type Prior struct {
	// Accepted: the ledger holds the request, and Ticket is the ticket its
	// row holds (the message names it; see ticket.Ref).
	Accepted bool
	Ticket   ticket.Ticket
	// Found: the request has a delivery record, Delivery. Delivery's
	// RequestID is set either way.
	Found    bool
	Delivery Delivery
}

// PriorDelivery reads, in one prepared query, the ticket of requestID and
// its delivery record.
func (l *Ledger) PriorDelivery(ctx context.Context, requestID string) (Prior, error) {
	p := Prior{Delivery: Delivery{RequestID: requestID}}
	var (
		tool, target, ticketID, title, body, priority, labels sql.NullString
		dTarget, state, lastErr, extID, extURL                sql.NullString
		created, attempts, next, updated                      sql.NullInt64
	)
	err := l.db.queryRow(ctx, `
		SELECT r.id IS NOT NULL, r.tool, r.target, r.ticket_id, r.title, r.body, r.priority, r.labels, r.created_at,
			d.target, d.state, d.attempts, d.next_attempt_at, d.last_error, d.external_id, d.external_url, d.updated_at
		FROM (SELECT 1) LEFT JOIN requests r ON r.request_id = ? LEFT JOIN deliveries d ON d.id = r.id`, requestID).
		Scan(&p.Accepted, &tool, &target, &ticketID, &title, &body, &priority, &labels, &created,
			&dTarget, &state, &attempts, &next, &lastErr, &extID, &extURL, &updated)
	if err != nil {
		return p, fmt.Errorf("ledger: read delivery %s: %w", requestID, err)
	}
	if !p.Accepted {
		return p, nil
	}
	p.Ticket = ticket.Ticket{
		Request: ticket.Request{RequestID: requestID, Tool: tool.String, Target: target.String,
			Title: title.String, Body: body.String, Priority: priority.String},
		ID:        ticketID.String,
		CreatedAt: time.Unix(0, created.Int64).UTC(),
	}
	if err := json.Unmarshal([]byte(labels.String), &p.Ticket.Labels); err != nil {
		return p, fmt.Errorf("ledger: read ticket %s: labels %q: %w", requestID, labels.String, err)
	}
	if !state.Valid {
		return p, nil
	}
	p.Found = true
	d := &p.Delivery
	d.Target, d.State, d.Attempts = dTarget.String, state.String, int(attempts.Int64)
	d.LastError, d.ExternalID, d.ExternalURL = lastErr.String, extID.String, extURL.String
	if next.Valid {
		d.NextAttemptAt = time.Unix(0, next.Int64).UTC()
	}
	d.UpdatedAt = time.Unix(0, updated.Int64).UTC()
	return p, nil
}

// RecordDelivery writes d durably (insert or replace). UpdatedAt is set to now.
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

func (l *Ledger) recordTx(d Delivery) func(ctx context.Context, tx *sql.Tx) error {
	var next any
	if !d.NextAttemptAt.IsZero() {
		next = d.NextAttemptAt.UnixNano()
	}
	return func(ctx context.Context, tx *sql.Tx) error {
		// The record takes the ledger row's id (see migration 5); a request
		// the ledger does not hold gets none.
		res, err := l.w.prepared(tx).ExecContext(ctx, `
			INSERT INTO deliveries (id, target, state, attempts, next_attempt_at, last_error, external_id, external_url, updated_at)
			SELECT id, ?, ?, ?, ?, ?, ?, ?, ? FROM requests WHERE request_id = ?
			ON CONFLICT(id) DO UPDATE SET
				target = excluded.target, state = excluded.state, attempts = excluded.attempts,
				next_attempt_at = excluded.next_attempt_at, last_error = excluded.last_error,
				external_id = excluded.external_id, external_url = excluded.external_url,
				updated_at = excluded.updated_at`,
			d.Target, d.State, d.Attempts, next, d.LastError, d.ExternalID, d.ExternalURL, l.now().UnixNano(), d.RequestID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmp.Or(err, ErrNotFound)
		}
		return nil
	}
}

func recordErr(d Delivery, err error) error {
	if err != nil {
		return fmt.Errorf("ledger: record delivery %s: %w", d.RequestID, err)
	}
	return nil
}
