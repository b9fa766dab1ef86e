package sqlitedb_test

import (
	"context"
	"database/sql"
	"runtime"
	"testing"

	"modernc.org/sqlite"
)

// The writer's transactions journal their statements in memory, also
// after the migrations, which sort on disk (decision 0199), and commits
// sync with fdatasync where the library can.
func TestWriterPragmas(t *testing.T) {
	e := openEnv(t, dbPath(t))
	var store int
	err := e.w.InTx(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, "PRAGMA temp_store").Scan(&store)
	})
	if err != nil || store != 2 {
		t.Fatalf("the writer's temp_store = %d, %v; want 2 (MEMORY)", store, err)
	}
	if runtime.GOOS == "linux" && !sqlite.FdatasyncEnabled() {
		t.Fatal("commits sync with fsync; want fdatasync")
	}
}
