package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/store/trail"
)

// ConsoleSchemaVersion is the ledger's migration for the console: the
// copy of a multi-host installation's cluster record (see
// docs/decisions/0152) and the counts kept on write (0153).
const ConsoleSchemaVersion = 20

// clusterCopyMigrations: the copy is a read table of its own, beside the
// host's ledger, written only by clusterrec.Copy: one row per record of
// the bucket (every host's requests), the record's delivery writes as a
// request's attempts, and the other hosts' audit entries that name a
// request. cluster_requests.id is local, in the order the records were
// first seen, and orders the lists as requests.id does; rev is the
// bucket's stream sequence of the row's last write, and says which rows
// the bucket no longer holds (below its first sequence).
var clusterCopyMigrations = []sqlitedb.Step{{Version: ConsoleSchemaVersion, SQL: `CREATE TABLE cluster_requests (
		id              INTEGER PRIMARY KEY,
		rkey            TEXT NOT NULL UNIQUE, -- the record's bucket key
		request_id      TEXT NOT NULL,        -- scoped
		subject         TEXT NOT NULL,
		ticket_id       TEXT NOT NULL,
		target          TEXT NOT NULL,
		title           TEXT NOT NULL,
		host            TEXT NOT NULL, -- the host that holds it in its ledger
		phase           TEXT NOT NULL, -- claimed, accepted
		created_at      INTEGER NOT NULL,
		state           TEXT,          -- the delivery record's; NULL: none yet
		next_attempt_at INTEGER,
		attempts        INTEGER NOT NULL DEFAULT 0,
		last_error      TEXT NOT NULL DEFAULT '',
		external_id     TEXT NOT NULL DEFAULT '',
		updated_at      INTEGER NOT NULL DEFAULT 0,
		by_host         TEXT NOT NULL DEFAULT '', -- the host whose forwarder wrote the delivery record
		rev             INTEGER NOT NULL
	);
	CREATE INDEX cluster_requests_state ON cluster_requests(state, id);
	CREATE INDEX cluster_requests_target ON cluster_requests(target, id);
	CREATE INDEX cluster_requests_request_id ON cluster_requests(request_id);
	CREATE INDEX cluster_requests_rev ON cluster_requests(rev);
	CREATE TABLE cluster_attempts (
		id      INTEGER NOT NULL, -- cluster_requests.id
		version INTEGER NOT NULL, -- the delivery record's version
		at      INTEGER NOT NULL,
		attempt INTEGER NOT NULL,
		outcome TEXT NOT NULL,
		error   TEXT NOT NULL,
		host    TEXT NOT NULL,
		PRIMARY KEY (id, version)
	) WITHOUT ROWID;
	CREATE TABLE cluster_trail (
		request_id TEXT NOT NULL,
		seq        INTEGER NOT NULL, -- the trail stream's sequence
		entry      TEXT NOT NULL,    -- trail.Entry as JSON
		PRIMARY KEY (request_id, seq)
	) WITHOUT ROWID;
	CREATE INDEX cluster_trail_seq ON cluster_trail(seq);
	CREATE TABLE cluster_copy_cursors (name TEXT PRIMARY KEY, pos INTEGER NOT NULL) WITHOUT ROWID;`},
	// The calls the delivery record's writes carry (clusterrec.Call,
	// decision 0146), as this host's attempts table keeps its own: a write
	// folded before, or written by an older build, has none (zeros).
	{Version: trail.IndexVersion, SQL: `ALTER TABLE cluster_attempts ADD COLUMN http_status INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE cluster_attempts ADD COLUMN class TEXT NOT NULL DEFAULT '';
	ALTER TABLE cluster_attempts ADD COLUMN latency_ns INTEGER NOT NULL DEFAULT 0;`}}

// ClusterCursor is the last sequence of stream name (request.CopyRecords,
// request.CopyTrail) the copy holds; 0: none.
func (l *Ledger) ClusterCursor(ctx context.Context, name string) (uint64, error) {
	var pos int64
	err := l.db.Reader().QueryRowContext(ctx, `SELECT pos FROM cluster_copy_cursors WHERE name = ?`, name).Scan(&pos)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ledger: cluster copy cursor: %w", err)
	}
	return uint64(pos), nil
}

func setCursorTx(ctx context.Context, tx *sql.Tx, name string, pos uint64) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO cluster_copy_cursors (name, pos) VALUES (?, ?)
		ON CONFLICT(name) DO UPDATE SET pos = max(pos, excluded.pos)`, name, int64(pos))
	return err
}

// FoldRecords writes recs into the copy, with the cursor at upTo, in one
// transaction. A record older than the row (a lower Rev) changes nothing.
func (l *Ledger) FoldRecords(ctx context.Context, recs []request.CopiedRecord, upTo uint64) error {
	err := l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		p := l.w.Prepared(tx)
		for _, r := range recs {
			if r.Deleted {
				if _, err := p.ExecContext(ctx, `DELETE FROM cluster_attempts WHERE id = (SELECT id FROM cluster_requests WHERE rkey = ?)`, r.Key); err != nil {
					return err
				}
				if _, err := p.ExecContext(ctx, `DELETE FROM cluster_requests WHERE rkey = ?`, r.Key); err != nil {
					return err
				}
				continue
			}
			var state, next any
			var attempts, version int64
			var lastErr, ext string
			var upd int64
			if d := r.Delivery; d != nil {
				state, attempts, lastErr, ext, upd, version = d.State, int64(d.Attempts), d.LastError, d.ExternalID, d.UpdatedAt.UnixNano(), d.Version
				if !d.NextAttemptAt.IsZero() {
					next = d.NextAttemptAt.UnixNano()
				}
			}
			if _, err := p.ExecContext(ctx, `INSERT INTO cluster_requests (rkey, request_id, subject, ticket_id, target, title, fingerprint, host, phase, created_at,
					state, next_attempt_at, attempts, last_error, external_id, updated_at, by_host, rev)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT(rkey) DO UPDATE SET fingerprint = excluded.fingerprint, host = excluded.host, phase = excluded.phase, state = excluded.state,
					next_attempt_at = excluded.next_attempt_at, attempts = excluded.attempts, last_error = excluded.last_error,
					external_id = excluded.external_id, updated_at = excluded.updated_at, by_host = excluded.by_host, rev = excluded.rev
				WHERE excluded.rev > cluster_requests.rev`,
				r.Key, r.RequestID, r.Subject, r.TicketID, r.Target, r.Title, r.Fingerprint, r.Host, r.Phase, r.AcceptedAt.UnixNano(),
				state, next, attempts, lastErr, ext, upd, r.By, int64(r.Rev)); err != nil {
				return err
			}
			if r.Delivery == nil || version == 0 {
				continue
			}
			// A write that ends a call is that call, at its start; another
			// (a claim before a call, a lookup's outcome) is the write.
			at, errText, status, class, latency := upd, lastErr, 0, "", int64(0)
			if a := r.Delivery.Attempt; a != nil {
				at, errText, status, class, latency = a.At.UnixNano(), a.Error, a.HTTPStatus, a.Class, int64(a.Latency)
			}
			if _, err := p.ExecContext(ctx, `INSERT OR IGNORE INTO cluster_attempts (id, version, at, attempt, outcome, error, host, http_status, class, latency_ns)
				SELECT id, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM cluster_requests WHERE rkey = ?`,
				version, at, attempts, r.Delivery.State, errText, r.By, status, class, latency, r.Key); err != nil {
				return err
			}
			if version > KeptAttempts {
				if _, err := p.ExecContext(ctx, `DELETE FROM cluster_attempts WHERE id = (SELECT id FROM cluster_requests WHERE rkey = ?) AND version <= ?`,
					r.Key, version-KeptAttempts); err != nil {
					return err
				}
			}
		}
		return setCursorTx(ctx, tx, request.CopyRecords, upTo)
	})
	if err != nil {
		return fmt.Errorf("ledger: fold cluster records: %w", err)
	}
	return nil
}

// FoldTrail writes entries into the copy, with the cursor at upTo.
func (l *Ledger) FoldTrail(ctx context.Context, entries []trail.CopiedEntry, upTo uint64) error {
	err := l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		p := l.w.Prepared(tx)
		for _, e := range entries {
			b, err := json.Marshal(e.Entry)
			if err != nil {
				return err
			}
			if _, err := p.ExecContext(ctx, `INSERT OR IGNORE INTO cluster_trail (request_id, seq, entry) VALUES (?, ?, ?)`,
				e.Entry.RequestID, int64(e.Seq), string(b)); err != nil {
				return err
			}
		}
		return setCursorTx(ctx, tx, request.CopyTrail, upTo)
	})
	if err != nil {
		return fmt.Errorf("ledger: fold cluster trail: %w", err)
	}
	return nil
}

// PruneClusterCopy removes, up to batch rows each, the records the
// bucket no longer holds (written below its first sequence: expired) and
// the trail entries below the trail stream's first sequence; it returns
// how many went.
func (l *Ledger) PruneClusterCopy(ctx context.Context, recordsFrom, trailFrom uint64, batch int) (int64, error) {
	var n int64
	err := l.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		p := l.w.Prepared(tx)
		if _, err := p.ExecContext(ctx, `DELETE FROM cluster_attempts WHERE id IN (SELECT id FROM cluster_requests WHERE rev < ? LIMIT ?)`,
			int64(recordsFrom), batch); err != nil {
			return err
		}
		res, err := p.ExecContext(ctx, `DELETE FROM cluster_requests WHERE id IN (SELECT id FROM cluster_requests WHERE rev < ? LIMIT ?)`,
			int64(recordsFrom), batch)
		if err != nil {
			return err
		}
		a, _ := res.RowsAffected()
		res, err = p.ExecContext(ctx, `DELETE FROM cluster_trail WHERE (request_id, seq) IN (SELECT request_id, seq FROM cluster_trail WHERE seq < ? LIMIT ?)`,
			int64(trailFrom), batch)
		if err != nil {
			return err
		}
		b, _ := res.RowsAffected()
		n = a + b
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("ledger: prune cluster copy: %w", err)
	}
	return n, nil
}

// ListCluster reads a page of the installation's requests f selects, from
// the copy, as ListRequests reads this host's. Each row names the host
// that holds it.
func (l *Ledger) ListCluster(ctx context.Context, f RequestFilter) (RequestPage, error) {
	q, err := l.listQueryFor(ctx, clusterFamily, f)
	if err != nil {
		return RequestPage{}, err
	}
	return l.listPage(ctx, q, f.Limit, func(r *RequestRow) ([]any, func()) {
		var phase string
		return []any{&r.Host, &phase}, func() {
			if r.State == ListWaiting && phase != "accepted" {
				r.State = ListClaimed
			}
		}
	})
}

// ListClaimed is the list status of a record claimed by a host that has
// not accepted it (yet): a call in progress, or one cut before its answer.
const ListClaimed = "claimed"

// ClusterRequest reads the copy's row of the request whose scoped id is
// id; found false if the copy has none.
func (l *Ledger) ClusterRequest(ctx context.Context, id string) (request.CopiedRecord, bool, error) {
	r := request.CopiedRecord{RequestID: id}
	var created, upd, rev int64
	var state sql.NullString
	var next sql.NullInt64
	var attempts int
	var lastErr, ext string
	err := l.db.Reader().QueryRowContext(ctx, `SELECT rkey, subject, ticket_id, target, title, host, phase, created_at,
		state, next_attempt_at, attempts, last_error, external_id, updated_at, by_host, rev FROM cluster_requests WHERE request_id = ?`, id).Scan(
		&r.Key, &r.Subject, &r.TicketID, &r.Target, &r.Title, &r.Host, &r.Phase, &created, &state, &next, &attempts, &lastErr, &ext, &upd, &r.By, &rev)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("ledger: cluster copy of %s: %w", id, err)
	}
	r.AcceptedAt, r.Rev = time.Unix(0, created).UTC(), uint64(rev)
	if state.Valid {
		r.Delivery = &request.Delivery{RequestID: id, Target: r.Target, State: state.String, Attempts: attempts, LastError: lastErr,
			ExternalID: ext, UpdatedAt: time.Unix(0, upd).UTC()}
		if next.Valid {
			r.Delivery.NextAttemptAt = time.Unix(0, next.Int64).UTC()
		}
	}
	return r, true, nil
}

// ClusterAttempts reads the delivery record's writes the copy kept of the
// request whose scoped id is id, oldest first: each with the host that
// wrote it, and the HTTP status, class and latency of the call it ended
// (none for a write that ended no call, or one an older build wrote).
func (l *Ledger) ClusterAttempts(ctx context.Context, id string) ([]request.Attempt, error) {
	rows, err := l.db.Reader().QueryContext(ctx, clusterAttemptsQuery, id)
	if err != nil {
		return nil, fmt.Errorf("ledger: cluster attempts of %s: %w", id, err)
	}
	defer rows.Close()
	var out []request.Attempt
	for rows.Next() {
		var a request.Attempt
		var at, latency int64
		if err := rows.Scan(&at, &a.Attempt, &a.Outcome, &a.Error, &a.Host, &a.HTTPStatus, &a.Class, &latency); err != nil {
			return nil, fmt.Errorf("ledger: cluster attempts of %s: %w", id, err)
		}
		a.At, a.Latency = time.Unix(0, at).UTC(), time.Duration(latency)
		out = append(out, a)
	}
	return out, rows.Err()
}

// A request's page reads its rows of the copy by index (its request id
// first in each key), as TestClusterRequestQueriesReadIndexes checks.
const (
	clusterAttemptsQuery = `SELECT a.at, a.attempt, a.outcome, a.error, a.host, a.http_status, a.class, a.latency_ns
		FROM cluster_requests r JOIN cluster_attempts a ON a.id = r.id WHERE r.request_id = ? ORDER BY r.id, a.version`
	clusterTrailQuery = `SELECT entry FROM cluster_trail WHERE request_id = ? ORDER BY seq`
)

// ClusterTrail reads the other hosts' audit entries the copy holds of the
// request whose scoped id is id, in the trail stream's order.
func (l *Ledger) ClusterTrail(ctx context.Context, id string) ([]trail.Entry, error) {
	rows, err := l.db.Reader().QueryContext(ctx, clusterTrailQuery, id)
	if err != nil {
		return nil, fmt.Errorf("ledger: cluster trail of %s: %w", id, err)
	}
	defer rows.Close()
	var out []trail.Entry
	for rows.Next() {
		var b string
		var e trail.Entry
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("ledger: cluster trail of %s: %w", id, err)
		}
		if err := json.Unmarshal([]byte(b), &e); err != nil {
			return nil, fmt.Errorf("ledger: cluster trail of %s: %w", id, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
