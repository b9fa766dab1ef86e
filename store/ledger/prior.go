package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/ticket"
)

// PriorDelivery reads the ticket of requestID and its delivery record.
//
// The forwarder's workers (64 for the local target) each call it before
// every attempt, so concurrent calls share one query: while a query runs,
// the calls that arrive wait, and the next query answers all of them. A
// query of its own cost each read a read transaction: SQLite's check of the
// WAL index, and after every commit of either process the interior pages of
// both indexes read again. The caller's ctx does not cut a shared query
// short; the read pool's busy_timeout bounds it.
func (l *Ledger) PriorDelivery(ctx context.Context, requestID string) (request.Prior, error) {
	return l.prior.read(context.WithoutCancel(ctx), l.db, requestID)
}

// PriorDeliveries is PriorDelivery for many requests in one query: ps[i]
// answers ids[i], unless errs[i], that request's own error, is set. err is
// the query's: then nothing was read. At most MaxPriorBatch ids.
//
// The forwarder reads the messages its consumer pulled together with it:
// one query, one read transaction and one look at the WAL index for a
// pull's worth of tickets.
func (l *Ledger) PriorDeliveries(ctx context.Context, ids []string) (ps []request.Prior, errs []error, err error) {
	if len(ids) > request.MaxPriorBatch {
		return nil, nil, fmt.Errorf("ledger: read deliveries: %d ids, at most %d", len(ids), request.MaxPriorBatch)
	}
	ps = make([]request.Prior, len(ids))
	calls := make([]priorCall, len(ids))
	batch := make([]*priorCall, len(ids))
	for i, id := range ids {
		calls[i].requestID, calls[i].p = id, &ps[i]
		batch[i] = &calls[i]
	}
	if err := readPriors(context.WithoutCancel(ctx), l.db, batch); err != nil {
		return nil, nil, err
	}
	errs = make([]error, len(ids))
	for i := range calls {
		errs[i] = calls[i].err
	}
	return ps, errs, nil
}

// priorCall is one PriorDelivery call waiting for its answer.
type priorCall struct {
	requestID string
	p         *request.Prior // where the answer goes
	err       error
	lead      bool          // woken to run the next query rather than with an answer
	wake      chan struct{} // closed once p/err are set, or lead is
}

// priorReads coalesces PriorDelivery calls. No goroutine of its own: the
// first caller runs the query for every call waiting, then hands the next
// query to the first caller that arrived meanwhile. Its zero value is ready.
type priorReads struct {
	mu      sync.Mutex
	pending []*priorCall
	running bool // a caller is running a query
}

func (r *priorReads) read(ctx context.Context, db *sqlitedb.DB, requestID string) (request.Prior, error) {
	var p request.Prior
	c := &priorCall{requestID: requestID, p: &p, wake: make(chan struct{})}
	r.mu.Lock()
	r.pending = append(r.pending, c)
	lead := !r.running
	r.running = true
	r.mu.Unlock()
	if !lead {
		<-c.wake
		if !c.lead {
			return p, c.err
		}
	}
	r.mu.Lock()
	n := min(len(r.pending), request.MaxPriorBatch)
	batch := r.pending[:n:n]
	r.pending = r.pending[n:]
	r.mu.Unlock()

	err := readPriors(ctx, db, batch)

	r.mu.Lock()
	if len(r.pending) > 0 {
		next := r.pending[0]
		next.lead = true
		close(next.wake)
	} else {
		r.running = false
		r.pending = nil
	}
	r.mu.Unlock()
	for _, b := range batch {
		if err != nil {
			b.err = err
		}
		if b != c {
			close(b.wake)
		}
	}
	return p, c.err
}

// readPriors answers batch in one query.
func readPriors(ctx context.Context, db *sqlitedb.DB, batch []*priorCall) error {
	ids := make([]string, len(batch))
	for i, c := range batch {
		ids[i] = c.requestID
		*c.p = request.Prior{Delivery: request.Delivery{RequestID: c.requestID}}
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	rows, err := db.Query(ctx, `
		SELECT j.key, r.id IS NOT NULL, r.subject, r.caller_name, r.caller_email, r.tool, r.target, r.ticket_id, r.title, r.body, r.priority, r.labels, r.created_at,
			d.target, d.state, d.attempts, d.throttled, d.next_attempt_at, d.last_error, d.failure, d.external_id, d.external_url, d.updated_at, d.version,
			r.kind, r.on_request, r.ref, r.fields, o.id IS NOT NULL, od.state, od.external_id, od.external_url,
			r.kind = 'update' AND r.on_request != '' AND EXISTS (SELECT 1 FROM requests e LEFT JOIN deliveries ed ON ed.id = e.id
				WHERE e.on_request = r.on_request AND e.on_request != '' AND e.kind = 'update' AND e.id < r.id
					AND coalesce(ed.state, '') NOT IN ('delivered', 'failed', 'uncertain'))
		FROM json_each(?) j LEFT JOIN requests r ON r.request_id = j.value LEFT JOIN deliveries d ON d.id = r.id
			LEFT JOIN requests o ON r.on_request != '' AND o.request_id = r.on_request LEFT JOIN deliveries od ON od.id = o.id`, string(list))
	if err != nil {
		return fmt.Errorf("ledger: read deliveries: %w", err)
	}
	defer rows.Close()
	// The scan's destinations are declared once for all rows: Scan takes
	// their addresses, so each one is a heap allocation.
	var (
		i                                                    int
		accepted                                             bool
		tool, target, ticketID, title, body, priority        sql.NullString
		subject, callerName, callerEmail                     sql.NullString
		labels                                               sql.RawBytes // reused from row to row
		dTarget, state, lastErr, failure, extID, extURL      sql.NullString
		created, attempts, throttled, next, updated, version sql.NullInt64
		kind, on, ref, fields, onState, onExtID, onExtURL    sql.NullString
		onAccepted, earlierUpdate                            sql.NullBool
	)
	dest := []any{&i, &accepted, &subject, &callerName, &callerEmail, &tool, &target, &ticketID, &title, &body, &priority, &labels, &created,
		&dTarget, &state, &attempts, &throttled, &next, &lastErr, &failure, &extID, &extURL, &updated, &version,
		&kind, &on, &ref, &fields, &onAccepted, &onState, &onExtID, &onExtURL, &earlierUpdate}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("ledger: read deliveries: %w", err)
		}
		if i < 0 || i >= len(batch) {
			return fmt.Errorf("ledger: read deliveries: row for index %d of %d", i, len(batch))
		}
		c := batch[i]
		if !accepted {
			continue
		}
		p := c.p
		p.Accepted = true
		p.Ticket = ticket.Ticket{
			Request: ticket.Request{RequestID: c.requestID, Tool: tool.String, Target: target.String,
				Title: title.String, Body: body.String, Priority: priority.String,
				Caller: callerOf(subject.String, callerName.String, callerEmail.String)},
			ID:        ticketID.String,
			CreatedAt: time.Unix(0, created.Int64).UTC(),
		}
		p.Ticket.Action = ticket.Action{Kind: kind.String, On: on.String, Ref: ref.String}
		if err := p.Ticket.LoadFields(fields.String); err != nil {
			c.err = fmt.Errorf("ledger: read ticket %s: %w", c.requestID, err)
			continue
		}
		if p.OnAccepted = onAccepted.Bool; p.OnAccepted {
			p.OnDelivery = request.Delivery{RequestID: on.String, State: onState.String, ExternalID: onExtID.String, ExternalURL: onExtURL.String}
		}
		p.EarlierUpdate = earlierUpdate.Bool
		if err := json.Unmarshal(labels, &p.Ticket.Labels); err != nil {
			c.err = fmt.Errorf("ledger: read ticket %s: labels %q: %w", c.requestID, labels, err)
			continue
		}
		if !state.Valid {
			continue
		}
		p.Found = true
		d := &p.Delivery
		d.Target, d.State, d.Attempts, d.Throttled = dTarget.String, state.String, int(attempts.Int64), int(throttled.Int64)
		d.LastError, d.Failure, d.ExternalID, d.ExternalURL = lastErr.String, request.Failure(failure.String), extID.String, extURL.String
		if next.Valid {
			d.NextAttemptAt = time.Unix(0, next.Int64).UTC()
		}
		d.UpdatedAt = time.Unix(0, updated.Int64).UTC()
		d.Version = version.Int64
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ledger: read deliveries: %w", err)
	}
	return nil
}
