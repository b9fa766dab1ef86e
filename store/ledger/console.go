package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
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
}, slices.Concat(clusterCopyMigrations, countsMigrations, clusterCountsMigrations)...)

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
	Status  string // ListAll, ListWaiting, ListInFlight, or a delivery Status
	Target  string
	Subject string
	Text    string    // in the title or the request id
	From    time.Time // accepted at or after; zero: no bound
	To      time.Time // accepted before; zero: no bound
	Before  int64     // rows with a smaller id; 0: from the newest
	Limit   int       // rows per page; at most 500
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

// ListRequests reads a page of the requests f selects. A status and a
// target are read through indexes, newest first; the other filters are
// checked on the rows walked, so a rare match on a large ledger is found
// by walking it.
func (l *Ledger) ListRequests(ctx context.Context, f RequestFilter) (RequestPage, error) {
	q, err := listRequestsQuery(f)
	if err != nil {
		return RequestPage{}, err
	}
	return l.listPage(ctx, q, f.Limit, nil)
}

// listRequestsQuery is the query of ListRequests' page f.
func listRequestsQuery(f RequestFilter) (listQuery, error) {
	if f.Limit <= 0 || f.Limit > 500 {
		return listQuery{}, fmt.Errorf("ledger: list requests: a page is 1 to 500 rows, not %d", f.Limit)
	}
	// A delivery status drives the walk from the deliveries' state index;
	// otherwise the walk is the requests', by id.
	q := listQuery{from: `deliveries d CROSS JOIN requests r ON r.id = d.id`, key: "d.id"}
	switch f.Status {
	case ListAll, ListWaiting:
		q.from, q.key = `requests r LEFT JOIN deliveries d ON d.id = r.id`, "r.id"
		if f.Status == ListWaiting {
			q.add(`d.id IS NULL`)
		}
		if f.Target != "" {
			q.add(`r.target = ?`, f.Target)
		}
	case ListInFlight:
		q.add(`d.state = ? AND d.next_attempt_at IS NULL`, request.DeliveryAttempting)
	case string(request.StatusRetrying):
		// An attempt that ended without a known outcome and waits for its
		// lookup is retrying, as find_request and status report it. Each
		// state is a range of the state index in id order, merged: one
		// condition over both states would sort every retrying record.
		q.branch(`d.state = ?`, string(request.StatusRetrying))
		q.branch(`d.state = ? AND d.next_attempt_at IS NOT NULL`, request.DeliveryAttempting)
	case string(request.StatusFailed), string(request.StatusUncertain), string(request.StatusDelivered):
		q.add(`d.state = ?`, f.Status)
	default:
		return listQuery{}, fmt.Errorf("ledger: list requests: no status %q (all, waiting, in_flight, retrying, failed, uncertain, delivered)", f.Status)
	}
	if f.Target != "" && f.Status != ListAll && f.Status != ListWaiting {
		q.add(`d.target = ?`, f.Target)
	}
	filterRows(f, "r.", &q)
	q.cols = q.key + `, r.request_id, r.subject, r.ticket_id, r.target, r.title, r.created_at,
		d.state, d.next_attempt_at IS NOT NULL, coalesce(d.attempts, 0), coalesce(d.last_error, ''), coalesce(d.updated_at, 0)`
	return q, nil
}

// listQuery is the query of a page of a list, newest first by key, its
// first column: every row of from where all of where holds and, if there
// are branches, one of them. Each branch is read on its own (a range of
// an index in key order) and the branches merged, so that no page sorts
// more than its rows.
type listQuery struct {
	cols, from, key string
	where           []string
	args            []any
	branches        []string
	branchArgs      [][]any
}

func (q *listQuery) add(cond string, a ...any) {
	q.where, q.args = append(q.where, cond), append(q.args, a...)
}

func (q *listQuery) branch(cond string, a ...any) {
	q.branches, q.branchArgs = append(q.branches, cond), append(q.branchArgs, a)
}

// sql is the statement and its arguments for a page of limit rows (one
// more is read, to know whether a next page exists).
func (q listQuery) sql(limit int) (string, []any) {
	selects, args := []string{}, []any{}
	read := func(conds []string, a []any) {
		s := `SELECT ` + q.cols + ` FROM ` + q.from
		if len(conds) > 0 {
			s += ` WHERE ` + strings.Join(conds, ` AND `)
		}
		selects, args = append(selects, s), append(args, a...)
	}
	if len(q.branches) == 0 {
		read(q.where, q.args)
	}
	for i, b := range q.branches {
		read(append([]string{b}, q.where...), append(slices.Clone(q.branchArgs[i]), q.args...))
	}
	return strings.Join(selects, ` UNION ALL `) + ` ORDER BY 1 DESC LIMIT ?`, append(args, limit+1)
}

// filterRows adds the filters both lists check on the rows they walk:
// subject, text, acceptance time and the page's start. prefix names the
// request's columns.
func filterRows(f RequestFilter, prefix string, q *listQuery) {
	if f.Subject != "" {
		q.add(prefix+`subject = ?`, f.Subject)
	}
	if f.Text != "" {
		q.add(`(instr(`+prefix+`title, ?) > 0 OR instr(`+prefix+`request_id, ?) > 0)`, f.Text, f.Text)
	}
	if !f.From.IsZero() {
		q.add(prefix+`created_at >= ?`, f.From.UnixNano())
	}
	if !f.To.IsZero() {
		q.add(prefix+`created_at < ?`, f.To.UnixNano())
	}
	if f.Before > 0 {
		q.add(q.key+` < ?`, f.Before)
	}
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
