package ledger

// Comments and updates (ticket.Action): the ledger row of such a request
// is a create's with its kind, what it acts on and, for an update, the
// fields it sets; its outbox row and message are a create's.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"ticketrelay/request"
	"ticketrelay/store/outbox"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/ticket"
)

// ActionsVersion is the schema version of the step below: the one place
// its number is written.
const ActionsVersion = 16

// actionsStep adds a request's kind (ticket.Action) to its ledger row.
// Every row from before is a create: the columns' defaults say so. A
// comment or an update on a ticket ticketrelay filed names that create by
// its scoped id (on_request), indexed only where set, for find_request's
// list of a ticket's comments and updates; ticket_id is indexed so that a
// comment can name its ticket by the id create answered. The tickets view
// shows creates only.
var actionsStep = sqlitedb.Step{Version: ActionsVersion, SQL: `ALTER TABLE requests ADD COLUMN kind TEXT NOT NULL DEFAULT '';
	ALTER TABLE requests ADD COLUMN on_request TEXT NOT NULL DEFAULT '';
	ALTER TABLE requests ADD COLUMN ref TEXT NOT NULL DEFAULT '';
	ALTER TABLE requests ADD COLUMN fields TEXT NOT NULL DEFAULT '';
	CREATE INDEX requests_on ON requests(on_request) WHERE on_request != '';
	CREATE INDEX requests_ticket ON requests(ticket_id);
	DROP VIEW tickets;
	CREATE VIEW tickets AS
		SELECT ticket_id, request_id, title, body, priority, labels, created_at FROM requests WHERE kind = '';`}

// TicketIndexVersion is the schema version of ticketIndexStep: the one
// place its number is written.
const TicketIndexVersion = 26

// ticketIndexStep keeps only creates in requests_ticket: a reference by
// ticket id names a create (ticketOfQuery reads creates only), and a comment,
// an update or an occurrence carries its ticket's id, so each of them
// wrote an index entry on its ticket's page that no lookup reads (0199).
var ticketIndexStep = sqlitedb.Step{Version: TicketIndexVersion, SQL: `DROP INDEX requests_ticket;
	CREATE INDEX requests_ticket ON requests(ticket_id) WHERE kind = '';`}

// ticketOfQuery reads the create a reference names (?2 its ticket id, ?3
// its scoped request id) among the requests of subject ?1: each a
// single-row index lookup. Two selects, since SQLite does not take a
// partial index (requests_ticket) for one side of an OR; the unary + keeps
// the planner off requests_subject (0156), which, without statistics, it
// would otherwise walk: every request of the caller, for each comment.
const ticketOfQuery = `SELECT request_id, target, ticket_id FROM requests WHERE ticket_id = ?2 AND kind = '' AND +subject = ?1
	UNION ALL SELECT request_id, target, ticket_id FROM requests WHERE request_id = ?3 AND kind = '' AND +subject = ?1 LIMIT 1`

// TicketOf finds the create that ref names among subject's requests: its
// ticket id (tkt_…) or the request_id it was created under. found is
// false if subject has no such create (a comment or an update is not a
// ticket).
func (l *Ledger) TicketOf(ctx context.Context, subject, ref string) (t ticket.Ticket, found bool, err error) {
	var scoped, target string
	err = l.db.QueryRow(ctx, ticketOfQuery, subject, ref, ticket.ScopedID(subject, ref)).Scan(&scoped, &target, &t.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return t, false, nil
	}
	if err != nil {
		return t, false, fmt.Errorf("ledger: resolve ticket %q: %w", ref, err)
	}
	t.Subject, t.Target = subject, target
	t.RequestID = strings.TrimPrefix(scoped, subject+ticket.SubjectSeparator)
	if subject == "" {
		t.RequestID = scoped
	}
	return t, true, nil
}

// actionsQuery reads the comments and updates on a create. The partial
// index requests_on holds only rows with an on_request; SQLite uses it
// only when the query itself excludes the empty value (a bound value
// proves nothing), else every find of a create walks the whole ledger.
const actionsQuery = `SELECT r.id, r.request_id, r.subject, r.kind, d.state, d.next_attempt_at
	FROM requests r LEFT JOIN deliveries d ON d.id = r.id WHERE r.on_request = ? AND r.on_request != '' ORDER BY r.id LIMIT ?`

// actions lists the comments and updates requested on the create whose
// scoped id is on, oldest first, each with its status.
func (l *Ledger) actions(ctx context.Context, st *request.Report, on string) error {
	rows, err := l.db.Query(ctx, actionsQuery, on, 2*request.MaxActionsShown)
	if err != nil {
		return fmt.Errorf("ledger: list comments and updates of %s: %w", on, err)
	}
	type row struct {
		id   int64
		a    request.Action
		kind string
		d    *request.Delivery
	}
	var got []row
	for rows.Next() {
		var r row
		var scoped, subject string
		var state sql.NullString
		var next sql.NullInt64
		if err := rows.Scan(&r.id, &scoped, &subject, &r.kind, &state, &next); err != nil {
			rows.Close()
			return fmt.Errorf("ledger: list comments and updates of %s: %w", on, err)
		}
		r.a.RequestID = strings.TrimPrefix(scoped, subject+ticket.SubjectSeparator)
		if subject == "" {
			r.a.RequestID = scoped
		}
		if state.Valid {
			r.d = &request.Delivery{State: state.String}
			if next.Valid {
				r.d.NextAttemptAt = timePtr(next.Int64).UTC()
			}
		}
		got = append(got, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ledger: list comments and updates of %s: %w", on, err)
	}
	for _, r := range got {
		rep := request.Report{}
		if r.d == nil {
			at, _, err := outbox.PublishedAt(ctx, l.db.Reader(), r.id)
			if err != nil {
				return err
			}
			if !at.IsZero() {
				rep.PublishedAt = &at
			}
		}
		rep.Settle(r.d)
		r.a.Status = rep.Status
		switch {
		case r.kind == ticket.KindComment && len(st.Comments) < request.MaxActionsShown:
			st.Comments = append(st.Comments, r.a)
		case r.kind == ticket.KindUpdate && len(st.Updates) < request.MaxActionsShown:
			st.Updates = append(st.Updates, r.a)
		}
	}
	return nil
}
