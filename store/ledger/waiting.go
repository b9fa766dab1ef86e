package ledger

// Comments and updates parked until their ticket's create settles: a
// request on a create not yet delivered is set aside here and its message
// acked, instead of being handed back to JetStream to wait there, where
// every waiting message held a place of the target's MaxAckPending and
// enough of them stalled the target's other deliveries. When the create's
// delivery record settles (delivered, failed, uncertain), the same
// transaction publishes the parked requests' messages again, under a new
// message id (outbox.RedriveTx), and the forwarder reads them as it did.

import (
	"context"
	"database/sql"
	"fmt"

	"ticketrelay/store/outbox"
	"ticketrelay/store/sqlitedb"
)

// WaitingVersion is the schema version of the step below: the one place
// its number is written.
const WaitingVersion = 18

// waitingMigrations add the parked requests: the ledger row id of each
// (requests.id, also its outbox row's) and the scoped id of the create it
// waits for.
var waitingMigrations = []sqlitedb.Step{{Version: WaitingVersion, SQL: `CREATE TABLE waiting (
		id         INTEGER PRIMARY KEY, -- the parked request's ledger row (requests.id)
		on_request TEXT NOT NULL        -- the create it waits for (requests.request_id)
	);
	CREATE INDEX waiting_on ON waiting(on_request);`}}

// settledStates are the delivery states a create does not leave by
// itself: what a parked request waits for.
const settledStates = `('delivered', 'failed', 'uncertain')`

// Park sets requestID, a comment or an update on a ticket ticketrelay
// filed, aside until that ticket's create settles, and reports true; its
// message can be acked. It reports false, parking nothing, if the create
// has settled meanwhile (the request can act now) or requestID acts on no
// create this ledger holds. Parking twice is parking once.
func (l *Ledger) Park(ctx context.Context, requestID string) (parked bool, err error) {
	err = l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO waiting (id, on_request)
			SELECT r.id, r.on_request FROM requests r JOIN requests o ON o.request_id = r.on_request LEFT JOIN deliveries od ON od.id = o.id
			WHERE r.request_id = ? AND r.on_request != '' AND coalesce(od.state, '') NOT IN `+settledStates+`
			ON CONFLICT(id) DO NOTHING`, requestID); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM waiting w JOIN requests r ON r.id = w.id WHERE r.request_id = ?)`,
			requestID).Scan(&parked)
	})
	if err != nil {
		return false, fmt.Errorf("ledger: park %s: %w", requestID, err)
	}
	return parked, nil
}

// unparkTx publishes again, in tx, the messages of the requests parked on
// requestID, whose delivery record tx has just written in state: once it
// settles.
func (l *Ledger) unparkTx(ctx context.Context, tx *sql.Tx, requestID, state string) error {
	switch state {
	case "delivered", "failed", "uncertain":
	default:
		return nil
	}
	// Most settled records have nothing parked on them: one prepared look.
	var waiting bool
	if err := l.w.Prepared(tx).QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM waiting WHERE on_request = ?)`, requestID).Scan(&waiting); err != nil || !waiting {
		return err
	}
	ids, err := column[int64](tx.QueryContext(ctx, `DELETE FROM waiting WHERE on_request = ? RETURNING id`, requestID))
	if err != nil {
		return fmt.Errorf("unpark the requests on %s: %w", requestID, err)
	}
	for _, id := range ids {
		if err := outbox.RedriveTx(ctx, tx, id); err != nil {
			return fmt.Errorf("unpark the requests on %s: %w", requestID, err)
		}
	}
	return nil
}

// column reads the one column of rows, a query's result, and closes them.
func column[T any](rows *sql.Rows, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
