package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/outbox"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/ticket"
	"ticketrelay/tracing"
)

// Ledger is the idempotency ledger of one database.
type Ledger struct {
	db     *sqlitedb.DB
	w      *sqlitedb.Writer
	now    func() time.Time
	prior  priorReads
	served servedCache
}

// New returns a ledger that writes through w and reads through db's read pool.
func New(db *sqlitedb.DB, w *sqlitedb.Writer, now func() time.Time) *Ledger {
	return &Ledger{db: db, w: w, now: now}
}

// Create accepts req exactly once. In one transaction it writes the ledger
// row, the ticket and the outbox row. A repeat with the same arguments gets
// the first result with Replayed set and writes nothing; a repeat with other
// arguments gets a *ConflictError. A repeat that arrives while the first is
// still committing is queued behind it on the writer and then replayed.
// req must already be normalized (ticket.Request.Normalize).
func (l *Ledger) Create(ctx context.Context, req ticket.Request) (request.Result, error) {
	return l.CreateAt(ctx, req, req.Hash(), l.now())
}

// CreateAt is Create for a request whose hash is known and whose
// acceptance time was decided elsewhere: the cluster record's claim, so
// that every host that commits the request stores the same ticket.
func (l *Ledger) CreateAt(ctx context.Context, req ticket.Request, hash string, at time.Time) (request.Result, error) {
	// No lookup on the read pool first: a retry is rare, and answering it
	// from the writer's transaction costs it one queued batch, while a
	// lookup before every first call cost a notable share of the server's
	// CPU (decision 0071 has the measurements).
	var res request.Result
	// The calling span's trace context goes with the outbox row: the
	// writer's transaction runs on no caller's context.
	tp, ts := tracing.Stored(ctx)
	err := l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		ptx := l.w.Prepared(tx)
		// Insert first: the unique index answers whether the id is new in
		// the same probe, and only a repeat pays for a lookup.
		r, inserted, err := l.insert(ctx, ptx, req, hash, at, tp, ts)
		if err != nil || inserted {
			res = r
			return err
		}
		res, err = lookup(ctx, ptx, req, hash)
		return err
	})
	return l.answer(ctx, res, err)
}

// answer is the answer of a create whose transaction ended with res and
// err: a replay's says what the running dispatchers deliver to.
func (l *Ledger) answer(ctx context.Context, res request.Result, err error) (request.Result, error) {
	if err != nil {
		return request.Result{}, err
	}
	if res.Live != nil {
		// The replay is answered even if the running dispatchers cannot be
		// read: its answer then lacks only whether one will deliver it.
		_ = l.addServed(ctx, res.Live)
	}
	return res, nil
}

// lookup answers from the existing ledger row of req: a replay, with where
// the request stands now (Result.Live, read in the same query), or a
// conflict.
func lookup(ctx context.Context, q outbox.Querier, req ticket.Request, hash string) (request.Result, error) {
	var storedHash, stored, subject string
	var st request.Report
	var row statusRow
	err := q.QueryRowContext(ctx, `SELECT r.args_hash, r.result, r.subject, `+statusColumns+` `+statusJoins+` WHERE r.request_id = ?`,
		req.Scoped()).Scan(append([]any{&storedHash, &stored, &subject}, row.dest(&st)...)...)
	if err == nil {
		err = row.readPublished(ctx, q)
	}
	if err != nil {
		return request.Result{}, fmt.Errorf("ledger: look up %s: %w", req.RequestID, err)
	}
	if subject != req.Subject {
		return request.Result{}, request.ErrOtherSubject
	}
	var res request.Result
	if err := json.Unmarshal([]byte(stored), &res); err != nil {
		return request.Result{}, fmt.Errorf("ledger: stored result of %s: %w", req.RequestID, err)
	}
	if storedHash != hash {
		return request.Result{}, &request.ConflictError{RequestID: req.RequestID, TicketID: res.TicketID, Tool: st.Tool}
	}
	res.Replayed = true
	st.RequestID, st.Scoped = req.RequestID, req.Scoped()
	row.fill(&st)
	res.Live = &st
	return res, nil
}

// insert writes the ledger row, with its ticket, and the outbox row, and
// returns the result, unless the ledger already holds req.RequestID: then it
// writes nothing and reports false.
func (l *Ledger) insert(ctx context.Context, tx sqlitedb.Tx, req ticket.Request, hash string, now time.Time, traceparent, tracestate string) (res request.Result, inserted bool, err error) {
	res, id, inserted, err := insertRow(ctx, tx, req, hash, now, request.Result{})
	if err != nil || !inserted {
		return request.Result{}, false, err
	}
	return res, true, insertOutbox(ctx, tx, req, id, now, traceparent, tracestate)
}

// insertRow writes the ledger row, with its ticket, and returns the result
// (res with the row's own fields set) and the row's id, unless the ledger
// already holds req.RequestID: then it writes nothing and reports false.
func insertRow(ctx context.Context, tx sqlitedb.Tx, req ticket.Request, hash string, now time.Time, res request.Result) (_ request.Result, id int64, inserted bool, err error) {
	t := ticket.Ticket{Request: req, ID: req.TicketID(), CreatedAt: now.UTC()}
	res.RequestID, res.TicketID, res.Target, res.Status, res.CreatedAt = req.RequestID, t.ID, req.Target, request.StatusQueued, t.CreatedAt
	stored, err := json.Marshal(res)
	if err != nil {
		return request.Result{}, 0, false, err
	}
	labels, err := json.Marshal(req.Labels)
	if err != nil {
		return request.Result{}, 0, false, err
	}
	// The ticket is stored in the ledger row, and the outbox row takes its
	// id: one insert at a random key per create (see migration 3).
	ins, err := tx.ExecContext(ctx,
		`INSERT INTO requests (request_id, subject, caller_name, caller_email, tool, target, args_hash, ticket_id, result, created_at, title, body, priority, labels,
			kind, on_request, ref, fields, fingerprint)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(request_id) DO NOTHING`,
		req.Scoped(), req.Subject, req.Caller.Name, req.Caller.Email, req.Tool, req.Target, hash, t.ID, string(stored), now.UnixNano(),
		req.Title, req.Body, req.Priority, string(labels), req.Kind, req.On, req.Ref, req.StoredFields(), req.Fingerprint)
	if err != nil {
		return request.Result{}, 0, false, fmt.Errorf("ledger: insert request %s: %w", req.RequestID, err)
	}
	if n, err := ins.RowsAffected(); err != nil || n == 0 {
		return request.Result{}, 0, false, err
	}
	id, err = ins.LastInsertId()
	if err != nil {
		return request.Result{}, 0, false, fmt.Errorf("ledger: insert request %s: %w", req.RequestID, err)
	}
	return res, id, true, nil
}

// insertOutbox writes the outbox row of req's ledger row id.
func insertOutbox(ctx context.Context, tx sqlitedb.Tx, req ticket.Request, id int64, now time.Time, traceparent, tracestate string) error {
	scoped := req.Scoped()
	payload, err := json.Marshal(ticket.Ref{RequestID: scoped, TicketID: req.TicketID(), Kind: req.Kind})
	if err != nil {
		return err
	}
	return outbox.InsertTx(ctx, tx, outbox.Message{
		ID:        id,
		RequestID: scoped,
		Subject:   outbox.SubjectFor(req.Target),
		Payload:   payload,
		CreatedAt: now,
		// The call's trace context: the relay publishes within its trace.
		TraceParent: traceparent,
		TraceState:  tracestate,
	})
}
