package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Queries of the outbox table for the packages that write beside it in one
// transaction (the ledger's create, redrive, retention) or read it (the
// stream audit, status commands). The outbox is their only author.

// Row is an outbox row as the stream audit sees it.
type Row struct {
	ID          int64 // the outbox (and ledger) row id
	RequestID   string
	Subject     string
	Generation  int
	PublishedAt time.Time // zero: not published (yet, or again after a redrive)
	Seq         uint64    // stream sequence of the stored message; 0: not known
}

// MsgID is the Nats-Msg-Id the row's message was published under.
func (r Row) MsgID() string { return Message{RequestID: r.RequestID, Generation: r.Generation}.MsgID() }

// RowsQuerier reads rows: *sql.DB, *sql.Tx.
type RowsQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// RowsAfter returns up to limit rows with ids above after, in id order.
func RowsAfter(ctx context.Context, q RowsQuerier, after int64, limit int) ([]Row, error) {
	rows, err := q.QueryContext(ctx, `SELECT id, request_id, subject, generation, published_at, stream_seq
		FROM outbox WHERE id > ? ORDER BY id LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: read rows: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		var published, seq sql.NullInt64
		if err := rows.Scan(&r.ID, &r.RequestID, &r.Subject, &r.Generation, &published, &seq); err != nil {
			return nil, fmt.Errorf("outbox: read rows: %w", err)
		}
		if published.Valid {
			r.PublishedAt = time.Unix(0, published.Int64)
		}
		if seq.Valid && seq.Int64 > 0 {
			r.Seq = uint64(seq.Int64)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: read rows: %w", err)
	}
	return out, nil
}

// LastID is the highest row id, 0 if there is none.
func LastID(ctx context.Context, q Querier) (int64, error) {
	var id int64
	if err := q.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM outbox`).Scan(&id); err != nil {
		return 0, fmt.Errorf("outbox: last id: %w", err)
	}
	return id, nil
}

// Unchanged reports whether r is still as read: the same generation,
// published, at the same stream sequence. False if the row is gone.
func Unchanged(ctx context.Context, q Querier, r Row) (bool, error) {
	var same bool
	err := q.QueryRowContext(ctx, `SELECT generation = ? AND published_at IS NOT NULL AND stream_seq IS ? FROM outbox WHERE id = ?`,
		r.Generation, sql.NullInt64{Int64: int64(r.Seq), Valid: r.Seq > 0}, r.ID).Scan(&same)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("outbox: read %d: %w", r.ID, err)
	}
	return same, nil
}

// DeleteTx removes the rows whose ids are in idsJSON (a JSON array) inside
// the caller's transaction: their requests are forgotten.
func DeleteTx(ctx context.Context, tx Execer, idsJSON string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM outbox WHERE id IN (SELECT value FROM json_each(?))`, idsJSON); err != nil {
		return fmt.Errorf("outbox: delete: %w", err)
	}
	return nil
}
