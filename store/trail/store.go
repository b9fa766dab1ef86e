package trail

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"ticketrelay/store/sqlitedb"
)

// SchemaVersion is the migration that adds the trail's tables: the one
// place its number is written.
const SchemaVersion = 13

// Migrations are the trail's steps of the database's one migration
// sequence (the ledger runs them all). Append only.
var Migrations = []sqlitedb.Step{{Version: SchemaVersion, SQL: schemaV1}, indexStep}

// schemaV1 keeps the trail as batches: one row per batch the writer
// stores, its entries as JSON lines. One row per entry, with the indexes
// its reads need, cost the front more per call than the 5% it may spend
// on the trail (decision 0145). An entry's seq is its batch's seq times
// batchSpan plus its place in the batch. AUTOINCREMENT: a seq is never
// used twice, even once retention removed every batch (the file sink and
// the shipper resume after the last seq they wrote). The trigger makes the
// table append-only to everything but retention's DELETE.
const schemaV1 = `
CREATE TABLE trail (
	seq      INTEGER PRIMARY KEY AUTOINCREMENT,
	first_at INTEGER NOT NULL, -- unix nanoseconds of the batch's first entry
	last_at  INTEGER NOT NULL, -- and of its last
	entries  BLOB NOT NULL     -- JSON lines, Entry without seq
);
CREATE INDEX trail_last_at ON trail(last_at);
CREATE TRIGGER trail_append_only BEFORE UPDATE ON trail
BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TABLE trail_cursors (
	name TEXT PRIMARY KEY, -- a sink: "file:PATH", "stream:NAME"
	seq  INTEGER NOT NULL  -- the last entry it holds
) WITHOUT ROWID;`

// batchSpan bounds the entries of one row; an entry's seq is its row's
// seq × batchSpan + its index in the row.
const batchSpan = 1 << 16

// Store is the trail's table in the database file: its own write
// connection and read pool beside the ledger's.
type Store struct {
	write, read *sql.DB
}

// dsn is the trail's connection string. Its commits do not fsync
// (synchronous=NORMAL): in WAL mode they reach the disk with the next
// commit of the ledger, which fsyncs the whole log, so the trail adds no
// fsync of its own to the front's budget. It leaves checkpoints to the
// ledger's checkpointer, and waits for the write lock with SQLite's busy
// handler: it writes in batches, off the calls' path.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Add("_pragma", "wal_autocheckpoint(0)")
		q.Set("_txlock", "immediate")
	}
	return "file:" + filepath.ToSlash(path) + "?" + q.Encode()
}

// Open opens the trail of the database at path, which ledger.Open has
// created and migrated.
func Open(ctx context.Context, path string) (*Store, error) {
	w, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("trail: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	r, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("trail: open %s read-only: %w", path, err)
	}
	r.SetMaxOpenConns(2)
	s := &Store{write: w, read: r}
	var n int
	if err := r.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'trail'`).Scan(&n); err != nil || n == 0 {
		s.Close()
		return nil, fmt.Errorf("trail: %s has no trail table (open it with ledger.Open first): %w", path, cmpErr(err))
	}
	return s, nil
}

func cmpErr(err error) error {
	if err == nil {
		return errors.New("schema older than version 13")
	}
	return err
}

// Close closes the pools.
func (s *Store) Close() error { return errors.Join(s.read.Close(), s.write.Close()) }

// Record appends e at once, in a transaction of its own: for the operator
// commands and the console, whose actions are few.
func (s *Store) Record(ctx context.Context, e Entry) error {
	_, err := s.Append(ctx, []Entry{e})
	return err
}

var _ Recorder = (*Store)(nil)

// Append stores entries in one transaction, in order, and returns the seq
// of the last. An invalid entry refuses the whole batch, which writes
// nothing.
func (s *Store) Append(ctx context.Context, entries []Entry) (int64, error) {
	if err := clean(entries); err != nil {
		return 0, err
	}
	rows, err := encode(entries)
	if err != nil {
		return 0, err
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("trail: begin: %w", err)
	}
	defer tx.Rollback()
	last, err := insert(ctx, tx, rows)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("trail: commit: %w", err)
	}
	return last, nil
}

// clean cleans and checks entries in place.
func clean(entries []Entry) error {
	for i := range entries {
		entries[i] = entries[i].Clean()
		if err := entries[i].Validate(); err != nil {
			return err
		}
	}
	return nil
}

// batchRow is one row of the trail as insert stores it.
type batchRow struct {
	firstAt, lastAt int64
	entries         []byte
	keys            any // requestKeys
	n               int
}

// encode makes the rows of entries, cleaned, batchSpan a row: before the
// transaction, so that the write lock is held for the inserts only.
func encode(entries []Entry) ([]batchRow, error) {
	var rows []batchRow
	for len(entries) > 0 {
		n := min(len(entries), batchSpan)
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		first, lastAt := entries[0].Time.UnixNano(), entries[0].Time.UnixNano()
		for _, e := range entries[:n] {
			e.Seq, e.Host = 0, ""
			if err := enc.Encode(e); err != nil {
				return nil, fmt.Errorf("trail: encode: %w", err)
			}
			first, lastAt = min(first, e.Time.UnixNano()), max(lastAt, e.Time.UnixNano())
		}
		rows = append(rows, batchRow{firstAt: first, lastAt: lastAt, entries: b.Bytes(), keys: requestKeys(entries[:n]), n: n})
		entries = entries[n:]
	}
	return rows, nil
}

// insert stores rows in tx and returns the seq of the last entry.
func insert(ctx context.Context, tx *sql.Tx, rows []batchRow) (int64, error) {
	var last int64
	for _, r := range rows {
		res, err := tx.ExecContext(ctx, `INSERT INTO trail (first_at, last_at, entries, request_keys) VALUES (?, ?, ?, ?)`,
			r.firstAt, r.lastAt, r.entries, r.keys)
		if err != nil {
			return 0, fmt.Errorf("trail: insert: %w", err)
		}
		row, err := res.LastInsertId()
		if err != nil {
			return 0, fmt.Errorf("trail: insert: %w", err)
		}
		last = row*batchSpan + int64(r.n-1)
	}
	return last, nil
}

// Query returns the entries f selects, oldest first. The rows are chosen
// by time and seq, and by the request index when f names a request; every
// other filter reads the entries of those rows.
func (s *Store) Query(ctx context.Context, f Filter) ([]Entry, error) {
	q, args := queryRows(f)
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("trail: query: %w", err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var row int64
		var data []byte
		if err := rows.Scan(&row, &data); err != nil {
			return nil, fmt.Errorf("trail: query: %w", err)
		}
		for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
			var e Entry
			if err := json.Unmarshal(line, &e); err != nil {
				return nil, fmt.Errorf("trail: entry %d of row %d: %w", i, row, err)
			}
			e.Seq, e.Time = row*batchSpan+int64(i), e.Time.UTC()
			if e.Seq > f.AfterSeq && f.Matches(e) {
				out = append(out, e)
				if f.Limit > 0 && len(out) == f.Limit {
					return out, nil
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("trail: query: %w", err)
	}
	return out, nil
}

// queryRows is the statement that reads the rows Query filters.
func queryRows(f Filter) (string, []any) {
	q, order := `SELECT t.seq, t.entries FROM trail t WHERE t.seq >= ?`, "t.seq"
	args := []any{f.AfterSeq / batchSpan}
	if f.RequestID != "" {
		// In the index's order: no sort.
		q, order = `SELECT t.seq, t.entries FROM trail_requests r JOIN trail t ON t.seq = r.seq WHERE r.rkey = ? AND r.seq >= ?`, "r.seq"
		args = []any{requestKey(f.RequestID), f.AfterSeq / batchSpan}
	}
	if !f.Since.IsZero() {
		q += ` AND t.last_at >= ?`
		args = append(args, f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		q += ` AND t.first_at < ?`
		args = append(args, f.Until.UnixNano())
	}
	return q + ` ORDER BY ` + order, args
}

// ForRequest returns every entry of the request with scoped id scopedID
// (ticket.ScopedID), oldest first: its calls and the operator actions on it.
func (s *Store) ForRequest(ctx context.Context, scopedID string) ([]Entry, error) {
	if scopedID == "" {
		return nil, errors.New("trail: ForRequest: empty request id")
	}
	return s.Query(ctx, Filter{RequestID: scopedID})
}

// Prune removes up to batch rows whose entries are all older than cutoff
// and returns how many.
func (s *Store) Prune(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	res, err := s.write.ExecContext(ctx, `DELETE FROM trail WHERE seq IN (SELECT seq FROM trail WHERE last_at < ? ORDER BY seq LIMIT ?)`,
		cutoff.UnixNano(), batch)
	if err != nil {
		return 0, fmt.Errorf("trail: prune: %w", err)
	}
	return res.RowsAffected()
}

// PruneBefore removes every row whose entries are all older than cutoff,
// some at a time so that it never holds the write lock for long, and
// returns how many.
func (s *Store) PruneBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	const batch = 100
	var total int64
	for {
		n, err := s.Prune(ctx, cutoff, batch)
		total += n
		if err != nil || n < batch {
			return total, err
		}
	}
}

// Cursor is the seq of the last entry the sink name holds; 0 if none.
func (s *Store) Cursor(ctx context.Context, name string) (int64, error) {
	var seq int64
	err := s.read.QueryRowContext(ctx, `SELECT seq FROM trail_cursors WHERE name = ?`, name).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("trail: cursor %s: %w", name, err)
	}
	return seq, nil
}

// SetCursor records that the sink name holds every entry up to seq.
func (s *Store) SetCursor(ctx context.Context, name string, seq int64) error {
	_, err := s.write.ExecContext(ctx, `INSERT INTO trail_cursors (name, seq) VALUES (?, ?)
		ON CONFLICT(name) DO UPDATE SET seq = excluded.seq`, name, seq)
	if err != nil {
		return fmt.Errorf("trail: cursor %s: %w", name, err)
	}
	return nil
}
