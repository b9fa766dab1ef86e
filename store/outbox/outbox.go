// Package outbox owns the outbox and leases tables: their schema (its
// steps of the database's migration sequence, Migrations), rows written
// inside the ledger's transaction (InsertTx, RedriveTx, DeleteTx), the
// reads others need (rows.go), and the Relay that publishes the rows to
// JetStream and marks them published. It never imports the ledger: the relay writes through
// the TxRunner it is given and publishes through the Publisher it defines.
package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// SubjectPrefix is the first token of every ticket subject.
const SubjectPrefix = "tickets"

// SubjectFor is the subject a ticket for target is published on.
func SubjectFor(target string) string { return SubjectPrefix + "." + target }

// TargetOf is the target a subject made by SubjectFor names.
func TargetOf(subject string) string {
	if len(subject) > len(SubjectPrefix)+1 {
		return subject[len(SubjectPrefix)+1:]
	}
	return subject
}

// Message is one outbox row.
type Message struct {
	ID         int64
	RequestID  string
	Subject    string
	Payload    []byte
	CreatedAt  time.Time
	Generation int // 0 when first accepted; +1 per operator redrive
	// The trace context of the call that accepted the request (W3C
	// traceparent and tracestate), sent with the message; empty: untraced.
	TraceParent, TraceState string
}

// MsgID is the Nats-Msg-Id of the message: the request id itself, so that
// JetStream drops a republish, or for a redrive a new id derived from it, so
// that JetStream stores it again even inside the duplicate window.
func (m Message) MsgID() string {
	if m.Generation == 0 {
		return m.RequestID
	}
	return fmt.Sprintf("%s#redrive-%d", m.RequestID, m.Generation)
}

// ErrNotFound is returned for an id without an outbox row.
var ErrNotFound = errors.New("outbox: no such request")

// RedriveTx queues message id for publishing again, under a new message id,
// inside the caller's transaction.
func RedriveTx(ctx context.Context, tx Execer, id int64) error {
	res, err := tx.ExecContext(ctx,
		`UPDATE outbox SET published_at = NULL, generation = generation + 1 WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("outbox: redrive %d: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	return nil
}

// Execer runs a statement in the caller's transaction: a *sql.Tx, or the
// ledger's transaction with prepared statements.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// InsertTx adds m to the outbox inside the caller's transaction, so the row
// exists if and only if the caller's other writes commit. m.ID is the row's
// id (the ledger passes its own row's); zero lets SQLite choose one.
func InsertTx(ctx context.Context, tx Execer, m Message) error {
	id := sql.NullInt64{Int64: m.ID, Valid: m.ID != 0}
	_, err := tx.ExecContext(ctx,
		`INSERT INTO outbox (id, request_id, subject, payload, created_at, traceparent, tracestate) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		id, m.RequestID, m.Subject, m.Payload, m.CreatedAt.UnixNano(), nullable(m.TraceParent), nullable(m.TraceState))
	if err != nil {
		return fmt.Errorf("outbox: insert %s: %w", m.RequestID, err)
	}
	return nil
}

// nullable stores "" as NULL: an untraced row keeps no empty strings.
func nullable(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// Querier is what the read helpers need: *sql.DB or *sql.Tx.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// PublishedAt reports whether message id has an outbox row and when
// JetStream acknowledged it (zero if not yet).
func PublishedAt(ctx context.Context, q Querier, id int64) (at time.Time, found bool, err error) {
	var ns sql.NullInt64
	err = q.QueryRowContext(ctx, `SELECT published_at FROM outbox WHERE id = ?`, id).Scan(&ns)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("outbox: read %d: %w", id, err)
	}
	if ns.Valid {
		at = time.Unix(0, ns.Int64)
	}
	return at, true, nil
}

// Backlog counts the rows not yet published and the commit time of the oldest.
func Backlog(ctx context.Context, q Querier) (n int64, oldest time.Time, err error) {
	var min sql.NullInt64
	err = q.QueryRowContext(ctx,
		`SELECT count(*), min(created_at) FROM outbox WHERE published_at IS NULL`).Scan(&n, &min)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("outbox: backlog: %w", err)
	}
	if min.Valid {
		oldest = time.Unix(0, min.Int64)
	}
	return n, oldest, nil
}
