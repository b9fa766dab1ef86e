package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"

	_ "modernc.org/sqlite" // the "sqlite" driver, as the ledger uses
)

// openReadOnly opens a ledger file for the harness's own queries, beside
// the processes that write it.
func openReadOnly(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "query_only(1)")
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path)+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("bench: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

func count(ctx context.Context, db *sql.DB, query string, args ...any) (int64, error) {
	var n int64
	if err := db.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("bench: %s: %w", query, err)
	}
	return n, nil
}
