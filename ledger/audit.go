package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"ticketrelay/outbox"
)

// Published is an outbox row as the stream audit sees it.
type Published struct {
	ID          int64 // the outbox (and ledger) row id
	RequestID   string
	Target      string
	Generation  int
	PublishedAt time.Time // zero: not published (yet, or again after a redrive)
	Seq         uint64    // stream sequence of the stored message; 0: not known
	// Delivery is the state of the request's delivery record ("": none
	// yet), DeliveryUpdated when it was last written.
	Delivery        string
	DeliveryUpdated time.Time
}

// Settled reports whether the request's delivery needs nothing more.
func (p Published) Settled() bool { return Delivery{State: p.Delivery}.Settled() }

// MsgID is the Nats-Msg-Id the message was published under.
func (p Published) MsgID() string {
	return outbox.Message{RequestID: p.RequestID, Generation: p.Generation}.MsgID()
}

// LastID is the highest outbox (and ledger row) id, 0 if there is none.
func (l *Ledger) LastID(ctx context.Context) (int64, error) {
	var id int64
	if err := l.db.read.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM outbox`).Scan(&id); err != nil {
		return 0, fmt.Errorf("ledger: last id: %w", err)
	}
	return id, nil
}

// PublishedAfter returns up to limit outbox rows with ids above after, in id
// order, each with its request's delivery record state.
func (l *Ledger) PublishedAfter(ctx context.Context, after int64, limit int) ([]Published, error) {
	rows, err := l.db.read.QueryContext(ctx, `
		SELECT o.id, o.request_id, o.subject, o.generation, o.published_at, o.stream_seq, d.state, d.updated_at
		FROM outbox o LEFT JOIN deliveries d ON d.id = o.id
		WHERE o.id > ? ORDER BY o.id LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("ledger: read published rows: %w", err)
	}
	defer rows.Close()
	var out []Published
	for rows.Next() {
		var p Published
		var published, seq, updated sql.NullInt64
		var state sql.NullString
		var subject string
		if err := rows.Scan(&p.ID, &p.RequestID, &subject, &p.Generation, &published, &seq, &state, &updated); err != nil {
			return nil, fmt.Errorf("ledger: read published rows: %w", err)
		}
		p.Target = outbox.TargetOf(subject)
		p.Delivery = state.String
		if updated.Valid {
			p.DeliveryUpdated = time.Unix(0, updated.Int64)
		}
		if published.Valid {
			p.PublishedAt = time.Unix(0, published.Int64)
		}
		if seq.Valid && seq.Int64 > 0 {
			p.Seq = uint64(seq.Int64)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: read published rows: %w", err)
	}
	return out, nil
}

// RepublishLost queues p's message to be published again under a new
// message id (as a redrive does), because the stream no longer holds it. It
// does nothing and returns false if the row or its delivery record changed
// since p was read (a delivery was recorded, it was republished already), or
// the delivery is settled.
func (l *Ledger) RepublishLost(ctx context.Context, p Published) (bool, error) {
	if p.Settled() {
		return false, nil
	}
	var updated sql.NullInt64
	if p.Delivery != "" {
		updated = sql.NullInt64{Int64: p.DeliveryUpdated.UnixNano(), Valid: true}
	}
	var done bool
	err := l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		done = false
		var same bool
		err := tx.QueryRowContext(ctx, `
			SELECT o.generation = ? AND o.published_at IS NOT NULL AND o.stream_seq IS ?
				AND d.state IS ? AND d.updated_at IS ?
			FROM outbox o LEFT JOIN deliveries d ON d.id = o.id WHERE o.id = ?`,
			p.Generation, nullSeq(p.Seq), sql.NullString{String: p.Delivery, Valid: p.Delivery != ""}, updated, p.ID).Scan(&same)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && !same) {
			return nil
		}
		if err != nil {
			return err
		}
		done = true
		return outbox.RedriveTx(ctx, tx, p.ID)
	})
	if err != nil {
		return false, fmt.Errorf("ledger: republish %s: %w", p.RequestID, err)
	}
	return done, nil
}

func nullSeq(seq uint64) sql.NullInt64 {
	return sql.NullInt64{Int64: int64(seq), Valid: seq > 0}
}
