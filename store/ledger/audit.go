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

// LastID is the highest outbox (and ledger row) id, 0 if there is none.
func (l *Ledger) LastID(ctx context.Context) (int64, error) {
	id, err := outbox.LastID(ctx, l.db.Reader())
	if err != nil {
		return 0, fmt.Errorf("ledger: %w", err)
	}
	return id, nil
}

// PublishedAfter returns up to limit outbox rows with ids above after, in id
// order, each with its request's delivery record state, read in one read
// transaction.
func (l *Ledger) PublishedAfter(ctx context.Context, after int64, limit int) ([]request.Published, error) {
	tx, err := l.db.Reader().BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("ledger: read published rows: %w", err)
	}
	defer tx.Rollback()
	rows, err := outbox.RowsAfter(ctx, tx, after, limit)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	states, err := deliveryStates(ctx, tx, rows)
	if err != nil {
		return nil, fmt.Errorf("ledger: read published rows: %w", err)
	}
	out := make([]request.Published, len(rows))
	for i, r := range rows {
		s := states[r.ID]
		out[i] = request.Published{Row: r, Target: outbox.TargetOf(r.Subject), Delivery: s.state, DeliveryUpdated: s.updated}
	}
	return out, nil
}

type deliveryStamp struct {
	state   string
	updated time.Time
}

// deliveryStates reads the state of the delivery records of rows.
func deliveryStates(ctx context.Context, tx *sql.Tx, rows []outbox.Row) (map[int64]deliveryStamp, error) {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	q, err := tx.QueryContext(ctx, `SELECT id, state, updated_at FROM deliveries WHERE id IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return nil, err
	}
	defer q.Close()
	out := make(map[int64]deliveryStamp, len(rows))
	for q.Next() {
		var id, updated int64
		var state string
		if err := q.Scan(&id, &state, &updated); err != nil {
			return nil, err
		}
		out[id] = deliveryStamp{state: state, updated: time.Unix(0, updated)}
	}
	return out, q.Err()
}

// RepublishLost queues p's message to be published again under a new
// message id (as a redrive does), because the stream no longer holds it. It
// does nothing and returns false if the row or its delivery record changed
// since p was read (a delivery was recorded, it was republished already), or
// the delivery is settled.
func (l *Ledger) RepublishLost(ctx context.Context, p request.Published) (bool, error) {
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
		same, err := outbox.Unchanged(ctx, tx, p.Row)
		if err != nil || !same {
			return err
		}
		// The delivery record as read: none (NULL state), or the same write.
		err = tx.QueryRowContext(ctx, `SELECT (SELECT state FROM deliveries WHERE id = ?) IS ?
			AND (SELECT updated_at FROM deliveries WHERE id = ?) IS ?`,
			p.ID, sql.NullString{String: p.Delivery, Valid: p.Delivery != ""}, p.ID, updated).Scan(&same)
		if err != nil || !same {
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
