// Package sqlitedb is ticketrelay's SQLite file: opening it (DSN, pragmas,
// file mode), the migrations runner, the single writer of a process with
// its group commit, its checkpoints, and prepared statements. It owns no
// table: each owner (ledger, outbox) declares its tables' numbered
// migration steps and runs its queries on the DB and the Writer (decision
// 0141).
//
// All writes of a process go through one Writer goroutine that batches
// concurrent operations into one IMMEDIATE transaction (group commit), so a
// durable commit (WAL, synchronous=FULL) is paid once per batch rather than
// once per call, and no two connections of the process ever race for the
// write lock.
package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"modernc.org/sqlite" // registers the "sqlite" driver
)

// Commits sync with fdatasync(2), as SQLite's own builds do on Linux
// (modernc.org/sqlite's transpiled library keeps the source's fsync): the
// data and the size it needs to be read back are as durable, and a commit
// does not wait for the file's timestamps to pass through the file
// system's journal (decision 0199). Where the library cannot (macOS,
// Windows), commits keep fsync.
func init() { _, _ = sqlite.Fdatasync(true) }

// DB is an open ticketrelay database: a single-connection pool for the writer
// and a small read-only pool for lookups.
type DB struct {
	Path      string
	write     *sql.DB
	read      *sql.DB
	ckpt      *sql.DB // the Writer's checkpoints (checkpoint.go)
	readStmts readStmts
}

// dsn builds a modernc.org/sqlite DSN. WAL lets readers run beside the
// writer; synchronous=FULL makes every commit durable before it returns;
// _txlock=immediate takes the write lock at BEGIN, so a transaction never
// fails half-way on upgrade. Readers wait on a busy file with busy_timeout.
// The writer does not: SQLite's busy handler sleeps 1, 2, 5, 10 … 100 ms
// between tries, so against the other process's steady stream of short
// transactions it starves (decision 0069 has the measurements). The
// Writer retries BEGIN itself with sub-millisecond pauses (beginImmediate).
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "busy_timeout(10000)")
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "busy_timeout(0)")
		q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", autoCheckpointPages))
		// A statement that may fail half-way (an insert with triggers and
		// unique keys) journals the pages it changes, so that it alone can
		// be undone. That journal is never read for recovery; on a file,
		// which SQLite spills it to past 64 KiB in a transaction, it cost
		// two writes a page for the rest of each batch (decision 0199).
		q.Add("_pragma", "temp_store(MEMORY)")
		q.Set("_txlock", "immediate")
	}
	return "file:" + filepath.ToSlash(path) + "?" + q.Encode()
}

// Open opens (creating if needed) the database at path and migrates it to
// schema (see Merge). A new file is readable by its owner only (it holds
// every ticket); SQLite gives its -wal and -shm files the same mode.
func Open(ctx context.Context, path string, schema Sequence) (*DB, error) {
	if path == "" {
		return nil, errors.New("sqlitedb: empty database path")
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlitedb: open %s: %w", path, err)
	}
	f.Close()
	w, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("sqlitedb: open %s: %w", path, err)
	}
	// One connection: the writer serialises all writes of this process.
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := migrateRetrying(ctx, w, schema); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlitedb: migrate %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlitedb: open %s read-only: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	c, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("sqlitedb: open %s for checkpoints: %w", path, err)
	}
	c.SetMaxOpenConns(1)
	c.SetMaxIdleConns(1)
	return &DB{Path: path, write: w, read: r, ckpt: c}, nil
}

// Close closes the pools.
func (db *DB) Close() error {
	return errors.Join(db.readStmts.close(), db.read.Close(), db.ckpt.Close(), db.write.Close())
}

// QueryRow runs query on the read pool through its prepared statement:
// for the queries an owner runs often.
func (db *DB) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	return db.readStmts.queryRow(ctx, db.read, query, args...)
}

// Query is QueryRow for a query that returns rows.
func (db *DB) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return db.readStmts.query(ctx, db.read, query, args...)
}

// Reader is the read-only pool, for queries not worth a prepared
// statement (the relay's backlog gauge, status commands).
func (db *DB) Reader() *sql.DB { return db.read }

// migrateRetrying runs runMigrations, retrying SQLITE_BUSY for about 10 s. When
// both processes open a fresh file at once, both connections race to switch
// it to WAL (the journal_mode pragma runs as each connection opens), and
// SQLite answers the loser SQLITE_BUSY at once, without calling the busy
// handler, as it does for any lock upgrade that could deadlock.
func migrateRetrying(ctx context.Context, db *sql.DB, schema Sequence) error {
	delay := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := runMigrations(ctx, db, schema)
		if err == nil || !isBusy(err) || attempt == 100 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

func runMigrations(ctx context.Context, db *sql.DB, schema Sequence) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// WAL is persistent in the file; set it outside any transaction.
	if _, err := conn.ExecContext(ctx, "PRAGMA journal_mode=WAL"); err != nil {
		return fmt.Errorf("set WAL: %w", err)
	}
	// A step that builds an index over a large ledger sorts it: on disk,
	// not in the process's memory. The writer's small statements keep
	// temp_store=MEMORY (dsn).
	if _, err := conn.ExecContext(ctx, "PRAGMA temp_store=FILE"); err != nil {
		return fmt.Errorf("temp_store: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA temp_store=MEMORY")
	tx, err := conn.BeginTx(ctx, nil) // IMMEDIATE: the other process waits for us
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := schema.Up(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}
