package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/sqlitedb"
)

// consoleMigrations are the ledger's steps for the operator console: each
// request's attempts, and the indexes its pages read by.
var consoleMigrations = append([]sqlitedb.Step{
	// 13: the attempts of each request, not only the latest delivery
	// record: the console shows them on a timeline. Keyed by the ledger
	// row's id and the attempt's time, so one request's are together and
	// in order; bounded per request (KeptAttempts) and removed with the
	// request by retention. deliveries_state_id serves the requests list
	// of one status across targets, newest first, without a sort;
	// deliveries_state already serves it for one target (the rowid ends
	// every index).
	{Version: 15, SQL: `CREATE TABLE attempts (
		id          INTEGER NOT NULL, -- the ledger row's id (requests.id)
		at          INTEGER NOT NULL, -- unix nanoseconds: when the call started
		attempt     INTEGER NOT NULL, -- the record's attempt count after it
		outcome     TEXT NOT NULL,    -- the record's state after it
		http_status INTEGER NOT NULL DEFAULT 0,
		class       TEXT NOT NULL DEFAULT '', -- downstream error class; '' once delivered
		error       TEXT NOT NULL DEFAULT '',
		latency_ns  INTEGER NOT NULL DEFAULT 0,
		host        TEXT NOT NULL DEFAULT '', -- the dispatcher that called
		PRIMARY KEY (id, at)
	) WITHOUT ROWID;
	CREATE INDEX deliveries_state_id ON deliveries(state, id);`},
}, slices.Concat(clusterCopyMigrations, countsMigrations, clusterCountsMigrations, listIndexMigrations)...)

// KeptAttempts bounds the attempts kept per request: the newest ones.
const KeptAttempts = 50

// recordAttemptTx appends d.Attempt to the history of d's request, with
// the state d records, and drops the oldest beyond KeptAttempts. A
// request's first attempt (also the first after a redrive) and one past
// the bound look for old ones to drop; the others need not.
func (l *Ledger) recordAttemptTx(ctx context.Context, tx *sql.Tx, d request.Delivery) error {
	a := d.Attempt
	if _, err := l.w.Prepared(tx).ExecContext(ctx, `INSERT OR REPLACE INTO attempts (id, at, attempt, outcome, http_status, class, error, latency_ns, host)
		SELECT id, ?, ?, ?, ?, ?, ?, ?, ? FROM requests WHERE request_id = ?`,
		a.At.UnixNano(), d.Attempts, d.State, a.HTTPStatus, a.Class, a.Error, int64(a.Latency), a.Host, d.RequestID); err != nil {
		return fmt.Errorf("attempts: %w", err)
	}
	if d.Attempts != 1 && d.Attempts <= KeptAttempts {
		return nil
	}
	_, err := l.w.Prepared(tx).ExecContext(ctx, `DELETE FROM attempts WHERE id = (SELECT id FROM requests WHERE request_id = ?1)
		AND at < (SELECT a.at FROM attempts a WHERE a.id = (SELECT id FROM requests WHERE request_id = ?1) ORDER BY a.at DESC LIMIT 1 OFFSET ?2)`,
		d.RequestID, KeptAttempts-1)
	if err != nil {
		return fmt.Errorf("attempts: trim: %w", err)
	}
	return nil
}

// Attempts reads the attempts kept of the request whose scoped id is id,
// oldest first.
func (l *Ledger) Attempts(ctx context.Context, id string) ([]request.Attempt, error) {
	rows, err := l.db.Reader().QueryContext(ctx, `SELECT a.at, a.attempt, a.outcome, a.http_status, a.class, a.error, a.latency_ns, a.host
		FROM requests r JOIN attempts a ON a.id = r.id WHERE r.request_id = ? ORDER BY a.at`, id)
	if err != nil {
		return nil, fmt.Errorf("ledger: attempts of %s: %w", id, err)
	}
	defer rows.Close()
	var out []request.Attempt
	for rows.Next() {
		var a request.Attempt
		var at, lat int64
		if err := rows.Scan(&at, &a.Attempt, &a.Outcome, &a.HTTPStatus, &a.Class, &a.Error, &lat, &a.Host); err != nil {
			return nil, fmt.Errorf("ledger: attempts of %s: %w", id, err)
		}
		a.At, a.Latency = time.Unix(0, at).UTC(), time.Duration(lat)
		out = append(out, a)
	}
	return out, rows.Err()
}

// The statuses the requests list filters by, beside the Status values a
// delivery record holds (retrying, failed, uncertain, delivered).
const (
	ListAll      = ""
	ListWaiting  = "waiting"   // accepted, no delivery record yet
	ListInFlight = "in_flight" // a call without a dedupe key is running
)

// RequestFilter selects requests for the console's list. Rows come newest
// first, a page at a time: Before is the id the previous page ended at.
type RequestFilter struct {
	Status      string // ListAll, ListWaiting, ListInFlight, or a delivery Status
	Target      string
	Subject     string
	Text        string    // a request id, or words of the ticket (title, body, labels; the copy: title)
	Fingerprint string    // a create's fingerprint; not in the cluster copy
	From        time.Time // accepted at or after; zero: no bound
	To          time.Time // accepted before; zero: no bound
	Before      int64     // rows with a smaller id; 0: from the newest
	Limit       int       // rows per page; at most 500
}

// RequestRow is one request in the list.
type RequestRow struct {
	ID         int64
	RequestID  string // the scoped id: the name operators use
	Subject    string
	TicketID   string
	Target     string
	Title      string
	AcceptedAt time.Time
	State      string // the list status: waiting, in_flight, or a delivery Status
	Attempts   int
	LastError  string
	UpdatedAt  time.Time // zero without a delivery record
	Host       string    // the host holding it (the cluster copy's lists); "" in a host's own
}

// RequestPage is one page of the list; Next is the Before of the next
// page, 0 if this is the last.
type RequestPage struct {
	Rows []RequestRow
	Next int64
}

// ListRequests reads a page of the requests f selects, from the range
// of the index that holds the fewest of them (see lists.go).
func (l *Ledger) ListRequests(ctx context.Context, f RequestFilter) (RequestPage, error) {
	q, err := l.listQueryFor(ctx, ledgerFamily, f)
	if err != nil {
		return RequestPage{}, err
	}
	return l.listPage(ctx, q, f.Limit, nil)
}

// listPage reads a page of a list: q's columns are a RequestRow's (id,
// request id, subject, ticket id, target, title, acceptance, delivery
// state, whether a next attempt is set, attempts, last error, update),
// then extra's, which scans the row's further columns and finishes it.
func (l *Ledger) listPage(ctx context.Context, lq listQuery, limit int,
	extra func(r *RequestRow) (dest []any, finish func())) (RequestPage, error) {
	q, args := lq.sql(limit)
	rows, err := l.db.Reader().QueryContext(ctx, q, args...)
	if err != nil {
		return RequestPage{}, fmt.Errorf("ledger: list requests: %w", err)
	}
	defer rows.Close()
	var page RequestPage
	for rows.Next() {
		var r RequestRow
		var created, upd int64
		var state sql.NullString
		var next bool
		dest := []any{&r.ID, &r.RequestID, &r.Subject, &r.TicketID, &r.Target, &r.Title, &created,
			&state, &next, &r.Attempts, &r.LastError, &upd}
		var finish func()
		if extra != nil {
			var more []any
			more, finish = extra(&r)
			dest = append(dest, more...)
		}
		if err := rows.Scan(dest...); err != nil {
			return RequestPage{}, fmt.Errorf("ledger: list requests: %w", err)
		}
		r.AcceptedAt = time.Unix(0, created).UTC()
		r.State = listState(state, next)
		if upd != 0 {
			r.UpdatedAt = time.Unix(0, upd).UTC()
		}
		if finish != nil {
			finish()
		}
		if len(page.Rows) == limit {
			page.Next = page.Rows[len(page.Rows)-1].ID
			break
		}
		page.Rows = append(page.Rows, r)
	}
	return page, rows.Err()
}

// listState is the list status of a delivery record's state (none:
// waiting), next saying whether it has a next attempt time.
func listState(state sql.NullString, next bool) string {
	switch {
	case !state.Valid:
		return ListWaiting
	case state.String == request.DeliveryAttempting && next:
		return string(request.StatusRetrying)
	case state.String == request.DeliveryAttempting:
		return ListInFlight
	default:
		return state.String
	}
}

// LastError is a target's newest trouble: the last error of its newest
// retrying, failed or uncertain request.
type LastError struct {
	Error string
	At    time.Time
}

// LastErrors reads each target's LastError; a target without trouble is
// not in the map.
func (l *Ledger) LastErrors(ctx context.Context, targets []string) (map[string]LastError, error) {
	return l.lastErrors(ctx, "deliveries", targets)
}

// ClusterLastErrors is LastErrors of the whole installation: from the
// cluster record's copy, every host's requests.
func (l *Ledger) ClusterLastErrors(ctx context.Context, targets []string) (map[string]LastError, error) {
	return l.lastErrors(ctx, "cluster_requests", targets)
}

// lastErrors reads LastErrors from table, deliveries or cluster_requests
// (the same columns), through its index by state and target.
func (l *Ledger) lastErrors(ctx context.Context, table string, targets []string) (map[string]LastError, error) {
	out := map[string]LastError{}
	for _, t := range targets {
		for _, state := range []request.Status{request.StatusRetrying, request.StatusFailed, request.StatusUncertain} {
			var e LastError
			var at int64
			err := l.db.Reader().QueryRowContext(ctx, `SELECT last_error, updated_at FROM `+table+` WHERE state = ? AND target = ? ORDER BY id DESC LIMIT 1`,
				string(state), t).Scan(&e.Error, &at)
			if err == sql.ErrNoRows {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("ledger: last errors: %w", err)
			}
			e.At = time.Unix(0, at).UTC()
			if cur, ok := out[t]; !ok || e.At.After(cur.At) {
				out[t] = e
			}
		}
	}
	return out, nil
}
