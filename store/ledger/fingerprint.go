package ledger

// Fingerprinted creates (decision 0195): the first report of a
// fingerprint files the ticket and opens its group; a later report under
// another request id, while the group is open, is stored as an occurrence
// comment on that ticket. One writer transaction decides, so concurrent
// first reports on one host file one ticket.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/ticket"
	"ticketrelay/tracing"
)

// FingerprintVersion is the schema version of the step below: the one
// place its number is written.
const FingerprintVersion = 19

// fingerprintStep stores each request's fingerprint with it, and the open
// group of each fingerprint (request.GroupKey): the scoped id of its
// ticket's create, when it opened, how many reports it counts. The key is
// the table's primary key: one open group per fingerprint. A closing
// update of the ticket (update_ticket status closed), committed by
// whichever writer, ends its group in the same transaction, and so does
// pruning the ticket; a report after either files a new ticket.
var fingerprintStep = sqlitedb.Step{Version: FingerprintVersion, SQL: `ALTER TABLE requests ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '';
	CREATE TABLE fingerprint_groups (
		key         TEXT PRIMARY KEY, -- request.GroupKey(subject, target, fingerprint)
		first       TEXT NOT NULL,    -- the scoped id of the ticket's create
		opened_at   INTEGER NOT NULL, -- unix nanoseconds: when the first report was accepted
		occurrences INTEGER NOT NULL  -- reports counted, the first included
	) WITHOUT ROWID;
	CREATE INDEX fingerprint_groups_first ON fingerprint_groups(first);
	CREATE TRIGGER fingerprint_groups_close AFTER INSERT ON requests
		WHEN new.kind = 'update' AND new.on_request <> '' AND json_extract(new.fields, '$.status') = 'closed' BEGIN
		DELETE FROM fingerprint_groups WHERE first = new.on_request;
	END;
	CREATE TRIGGER fingerprint_groups_prune AFTER DELETE ON requests WHEN old.fingerprint <> '' AND old.kind = '' BEGIN
		DELETE FROM fingerprint_groups WHERE first = old.request_id;
	END;`}

// Group accepts req, a normalized create with a fingerprint, exactly once,
// as Create does, deciding in the same transaction whether it files a
// ticket or is an occurrence of its fingerprint's open ticket (g). A
// repeat of req's request id replays whichever it was, or conflicts.
func (l *Ledger) Group(ctx context.Context, req ticket.Request, g request.Grouping) (request.Result, error) {
	if req.Fingerprint == "" || req.Kind != ticket.KindCreate {
		return request.Result{}, fmt.Errorf("ledger: group %s: not a fingerprinted create", req.RequestID)
	}
	hash, now := req.Hash(), l.now()
	tp, ts := tracing.Stored(ctx)
	var res request.Result
	err := l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		ptx := l.w.Prepared(tx)
		key := request.GroupKey(req.Subject, req.Target, req.Fingerprint)
		var first, state string
		var opened int64
		var n int
		var link request.Link
		// A ticket whose create failed takes no occurrences: they would
		// fail with it. The report files a new one.
		err := ptx.QueryRowContext(ctx, `SELECT g.first, g.opened_at, g.occurrences, `+linkColumns+` FROM fingerprint_groups g
			LEFT JOIN requests r ON r.request_id = g.first LEFT JOIN deliveries d ON d.id = r.id WHERE g.key = ?`, key).
			Scan(&first, &opened, &n, &state, &link.ExternalID, &link.ExternalURL)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("ledger: read the group of %s: %w", req.RequestID, err)
		}
		// Either insert writes nothing if the request id is stored: then
		// this is a replay or a conflict, answered from its row.
		var inserted bool
		if err == nil && state != string(request.StatusFailed) && now.Before(time.Unix(0, opened).Add(g.Window)) {
			if res, inserted, err = l.occur(ctx, ptx, req, hash, now, tp, ts, first, n+1, g.Comments); err != nil || !inserted {
				return l.stored(ctx, ptx, req, hash, &res, err)
			}
			res.TicketLink = link
			_, err = ptx.ExecContext(ctx, `UPDATE fingerprint_groups SET occurrences = ? WHERE key = ?`, n+1, key)
			return err
		}
		if res, inserted, err = l.insert(ctx, ptx, req, hash, now, tp, ts); err != nil || !inserted {
			return l.stored(ctx, ptx, req, hash, &res, err)
		}
		_, err = ptx.ExecContext(ctx, `INSERT INTO fingerprint_groups (key, first, opened_at, occurrences) VALUES (?, ?, ?, 1)
			ON CONFLICT(key) DO UPDATE SET first = excluded.first, opened_at = excluded.opened_at, occurrences = 1`,
			key, req.Scoped(), now.UnixNano())
		return err
	})
	return l.answer(ctx, res, err)
}

// stored answers a report whose request id the ledger holds already (an
// insert that wrote nothing): a replay of it, or a conflict. err is the
// insert's.
func (l *Ledger) stored(ctx context.Context, tx sqlitedb.Tx, req ticket.Request, hash string, res *request.Result, err error) error {
	if err != nil {
		return err
	}
	if *res, err = lookup(ctx, tx, req, hash); err == nil && res.Grouped {
		res.TicketLink, err = linkOf(ctx, tx, ticket.ScopedID(req.Subject, res.GroupedOn))
	}
	return err
}

// occur stores req as the n-th report on the ticket whose create is first
// (a scoped id): an occurrence comment (request.Occurrence) with its outbox
// row, or, where the target takes no comments, the row alone with its
// delivery settled, since nothing is to be written downstream.
func (l *Ledger) occur(ctx context.Context, tx sqlitedb.Tx, req ticket.Request, hash string, now time.Time, tp, ts, first string, n int, comments bool) (_ request.Result, inserted bool, err error) {
	c := request.Occurrence(req, first, n)
	res, id, inserted, err := insertRow(ctx, tx, c, hash, now,
		request.Result{Grouped: true, GroupedOn: requestIDOf(first, req.Subject), Occurrences: n})
	if err != nil || !inserted {
		return request.Result{}, false, err
	}
	if comments {
		return res, true, insertOutbox(ctx, tx, c, id, now, tp, ts)
	}
	res.Status = request.StatusDelivered
	_, err = tx.ExecContext(ctx, `INSERT INTO deliveries (id, target, state, updated_at) VALUES (?, ?, ?, ?)`,
		id, req.Target, string(request.StatusDelivered), now.UnixNano())
	if err != nil {
		return request.Result{}, false, fmt.Errorf("ledger: record occurrence %s: %w", req.RequestID, err)
	}
	return res, true, nil
}

// linkColumns read a create's delivery state and where it was delivered,
// from its delivery record d ("" for none).
const linkColumns = `coalesce(d.state, ''), coalesce(d.external_id, ''), coalesce(d.external_url, '')`

// linkOf reads where the create whose scoped id is first was delivered.
func linkOf(ctx context.Context, tx sqlitedb.Tx, first string) (request.Link, error) {
	var state string
	var link request.Link
	err := tx.QueryRowContext(ctx, `SELECT `+linkColumns+` FROM requests r LEFT JOIN deliveries d ON d.id = r.id WHERE r.request_id = ?`, first).
		Scan(&state, &link.ExternalID, &link.ExternalURL)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil // pruned: no link
	}
	return link, err
}

// requestIDOf is the request id of subject's scoped id.
func requestIDOf(scoped, subject string) string {
	if subject == "" {
		return scoped
	}
	return scoped[len(ticket.ScopedID(subject, "")):]
}
