package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/outbox"
	"ticketrelay/ticket"
)

// Find reports the status of subject's requestID. An id never accepted is
// StatusUnknown, not an error, and so is another subject's.
func (l *Ledger) Find(ctx context.Context, subject, requestID string) (request.Report, error) {
	scoped := ticket.ScopedID(subject, requestID)
	return l.find(ctx, requestID, scoped, `r.request_id = ? AND r.subject = ?`, scoped, subject)
}

// FindScoped reports the status of the request whose scoped id
// (ticket.ScopedID) is id: operators name requests so, whoever made them.
func (l *Ledger) FindScoped(ctx context.Context, id string) (request.Report, error) {
	return l.find(ctx, id, id, `r.request_id = ?`, id)
}

// find reports the status of the request where selects, under the name
// shown; scoped is its scoped id.
func (l *Ledger) find(ctx context.Context, shown, scoped, where string, args ...any) (request.Report, error) {
	st := request.Report{RequestID: shown, Status: request.StatusUnknown, Scoped: scoped}
	var row statusRow
	err := l.db.QueryRow(ctx, `SELECT `+statusColumns+` `+statusJoins+` WHERE `+where, args...).Scan(row.dest(&st)...)
	if errors.Is(err, sql.ErrNoRows) {
		return st, nil
	}
	if err == nil {
		err = row.readPublished(ctx, l.db.Reader())
	}
	if err != nil {
		return st, fmt.Errorf("ledger: find %s: %w", shown, err)
	}
	row.fill(&st)
	if st.Kind == ticket.KindCreate {
		if err := l.actions(ctx, &st, scoped); err != nil {
			return st, err
		}
	}
	if err := l.addServed(ctx, &st); err != nil {
		return st, err
	}
	return st, nil
}

// statusColumns and statusJoins read where a request stands: its ledger
// row and delivery record (see statusRow); when the outbox published it,
// the outbox's own query answers (readPublished). Find uses them, and so
// does a replayed create, inside the writer's transaction, where it reads
// the ledger row anyway.
const (
	statusColumns = `r.id, r.subject, r.caller_name, r.caller_email, r.ticket_id, r.tool, r.target, r.created_at,
		d.state, d.attempts, d.throttled, d.next_attempt_at, d.last_error, d.failure, d.external_id, d.external_url, d.updated_at, r.kind, r.on_request, r.ref, r.fingerprint`
	statusJoins = `FROM requests r LEFT JOIN deliveries d ON d.id = r.id`
)

// statusRow holds the columns of statusColumns that are not request.Report
// fields as they are.
type statusRow struct {
	id, created                            int64
	caller                                 ticket.Caller
	published                              time.Time // zero: not published
	attempts, throttled, next, upd         sql.NullInt64
	state, lastErr, failure, extID, extURL sql.NullString
	on                                     string // the create a comment or an update acts on
	ref                                    string // the downstream's reference it acts on
}

// dest is the Scan destination of statusColumns, filling st and r.
func (r *statusRow) dest(st *request.Report) []any {
	return []any{&r.id, &r.caller.Subject, &r.caller.Name, &r.caller.Email, &st.TicketID, &st.Tool, &st.Target, &r.created,
		&r.state, &r.attempts, &r.throttled, &r.next, &r.lastErr, &r.failure, &r.extID, &r.extURL, &r.upd, &st.Kind, &r.on, &r.ref, &st.Fingerprint}
}

// readPublished reads when the request's outbox row was published.
func (r *statusRow) readPublished(ctx context.Context, q outbox.Querier) error {
	at, _, err := outbox.PublishedAt(ctx, q, r.id)
	r.published = at
	return err
}

// fill sets st's status and delivery fields from the row.
func (r *statusRow) fill(st *request.Report) {
	st.AcceptedAt = timePtr(r.created)
	if st.Kind != ticket.KindCreate {
		st.Ticket = cmp.Or(r.ref, st.TicketID)
		st.Grouped = st.Fingerprint != ""
	}
	st.Caller = r.caller.OrNil()
	if !r.published.IsZero() {
		st.PublishedAt = timePtr(r.published.UnixNano())
	}
	if !r.state.Valid {
		st.Settle(nil)
		return
	}
	d := request.Delivery{State: r.state.String, Attempts: int(r.attempts.Int64), Throttled: int(r.throttled.Int64),
		LastError: r.lastErr.String, Failure: request.Failure(r.failure.String), ExternalID: r.extID.String, ExternalURL: r.extURL.String,
		UpdatedAt: time.Unix(0, r.upd.Int64).UTC()}
	if r.next.Valid {
		d.NextAttemptAt = time.Unix(0, r.next.Int64).UTC()
	}
	st.Settle(&d)
}

// addServed sets, for a request still on its way, what the running
// dispatchers deliver to.
func (l *Ledger) addServed(ctx context.Context, st *request.Report) error {
	if !st.OnItsWay() {
		return nil
	}
	served, err := l.servedRecently(ctx)
	if err != nil {
		return err
	}
	st.Served = &served
	return nil
}

// callerOf is the caller of a ledger row: its subject, and the name and
// email recorded with it.
func callerOf(subject, name, email string) ticket.Caller {
	return ticket.Caller{Subject: subject, Name: name, Email: email}
}

func timePtr(ns int64) *time.Time {
	t := time.Unix(0, ns).UTC()
	return &t
}
