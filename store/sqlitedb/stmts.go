package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"slices"
	"sync"
)

// maxStmts bounds the prepared statements kept for the write connection.
// The owners' queries are constant strings, a few dozen at
// most; the bound only guards against a caller that builds queries.
const maxStmts = 64

// stmtCache keeps the write connection's statements prepared. SQLite
// compiles SQL to bytecode on every plain Exec, a notable share of the
// create path's CPU (decision 0069 has the measurements). A statement is
// prepared after the first transaction that runs it, between batches: the
// write pool has one connection, which an open transaction holds, so
// preparing on the pool inside a transaction would wait for itself.
//
// Only the writer goroutine touches a stmtCache.
type stmtCache struct {
	stmts  map[string]*sql.Stmt
	wanted []string
	// tx and inTx are the statements bound to the transaction running
	// now: a group commit runs the same statement for each of its
	// operations, and binding it anew each time (Tx.StmtContext) cost an
	// allocation and a lock per operation. database/sql closes them with
	// the transaction.
	tx   *sql.Tx
	inTx map[*sql.Stmt]*sql.Stmt
}

// exec runs query in tx through its prepared statement when there is one,
// and notes it to be prepared otherwise.
func (c *stmtCache) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	if s := c.lookup(query); s != nil {
		return c.bound(ctx, tx, s).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}

// queryRow is exec for a query that returns at most one row.
func (c *stmtCache) queryRow(ctx context.Context, tx *sql.Tx, query string, args ...any) *sql.Row {
	if s := c.lookup(query); s != nil {
		return c.bound(ctx, tx, s).QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, query, args...)
}

// bound is s bound to tx, once per transaction.
func (c *stmtCache) bound(ctx context.Context, tx *sql.Tx, s *sql.Stmt) *sql.Stmt {
	if c.tx != tx {
		c.tx = tx
		clear(c.inTx)
	}
	if b, ok := c.inTx[s]; ok {
		return b
	}
	b := tx.StmtContext(ctx, s)
	if c.inTx == nil {
		c.inTx = make(map[*sql.Stmt]*sql.Stmt)
	}
	c.inTx[s] = b
	return b
}

func (c *stmtCache) lookup(query string) *sql.Stmt {
	if s, ok := c.stmts[query]; ok {
		return s
	}
	if len(c.stmts)+len(c.wanted) < maxStmts && !slices.Contains(c.wanted, query) {
		c.wanted = append(c.wanted, query)
	}
	return nil
}

// prepareWanted prepares the statements noted since the last call. It runs
// while no transaction is open. A statement that fails to prepare is left
// to plain Exec, which reports the error to its caller.
func (c *stmtCache) prepareWanted(ctx context.Context, db *sql.DB, log *slog.Logger) {
	for _, q := range c.wanted {
		if _, ok := c.stmts[q]; ok {
			continue
		}
		s, err := db.PrepareContext(ctx, q)
		if err != nil {
			log.Debug("statement not prepared", "err", err)
			continue
		}
		if c.stmts == nil {
			c.stmts = make(map[string]*sql.Stmt)
		}
		c.stmts[q] = s
	}
	c.wanted = c.wanted[:0]
}

func (c *stmtCache) close() {
	c.tx, c.inTx = nil, nil
	for _, s := range c.stmts {
		s.Close()
	}
	c.stmts = nil
}

// Tx is a group-commit transaction whose statements go through the
// writer's prepared statements. It satisfies outbox.Execer, so the outbox's
// insert inside the ledger's transaction is prepared too.
type Tx struct {
	tx *sql.Tx
	c  *stmtCache
}

// ExecContext runs query in the transaction, prepared once it has run before.
func (t Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.c.exec(ctx, t.tx, query, args...)
}

// QueryRowContext is ExecContext for a query that returns at most one row.
func (t Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.c.queryRow(ctx, t.tx, query, args...)
}

// Prepared wraps tx, which must be the transaction of an operation running
// on the writer goroutine, so its statements are prepared ones.
func (w *Writer) Prepared(tx *sql.Tx) Tx { return Tx{tx: tx, c: &w.stmts} }

// readStmts keeps the read pool's per-message queries prepared: the forwarder
// reads a delivery record before every attempt, and SQLite used to parse that
// SELECT anew each time, a notable share of the dispatcher's CPU (decision
// 0075 has the measurements). database/sql prepares a Stmt on each pool
// connection the first time it runs there.
type readStmts struct {
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

// queryRow runs query on db through its prepared statement. If preparing
// fails, the plain query runs and reports the error to its caller.
func (c *readStmts) queryRow(ctx context.Context, db *sql.DB, query string, args ...any) *sql.Row {
	if s := c.stmt(ctx, db, query); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return db.QueryRowContext(ctx, query, args...)
}

// query is queryRow for a query that returns rows.
func (c *readStmts) query(ctx context.Context, db *sql.DB, query string, args ...any) (*sql.Rows, error) {
	if s := c.stmt(ctx, db, query); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return db.QueryContext(ctx, query, args...)
}

// stmt returns query's prepared statement, preparing it the first time; nil
// if that fails.
func (c *readStmts) stmt(ctx context.Context, db *sql.DB, query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.stmts[query]
	if !ok && len(c.stmts) < maxStmts {
		var err error
		if s, err = db.PrepareContext(ctx, query); err == nil {
			if c.stmts == nil {
				c.stmts = make(map[string]*sql.Stmt)
			}
			c.stmts[query] = s
		}
	}
	return s
}

func (c *readStmts) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, s := range c.stmts {
		errs = append(errs, s.Close())
	}
	c.stmts = nil
	return errors.Join(errs...)
}
