package sqlitedb_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestCheckpointsRunBesideTheWriter: committed pages reach the database file
// without a commit crossing the WAL backstop, and the process reports what
// is left in the WAL.
func TestCheckpointsRunBesideTheWriter(t *testing.T) {
	path := dbPath(t)
	e := openEnv(t, path)
	ctx := context.Background()

	var auto int
	if err := e.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, "PRAGMA wal_autocheckpoint").Scan(&auto)
	}); err != nil {
		t.Fatal(err)
	}
	if auto != 10000 {
		t.Errorf("write connection's wal_autocheckpoint = %d, want the 10000-page backstop", auto)
	}

	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	// ~1 MB of tickets: far below the backstop's ~40 MB of WAL, so only
	// the checkpointer can carry them into the file.
	body := strings.Repeat("x", 4000)
	for i := range 250 {
		r := newRequest(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
		r.Body = body
		if _, err := e.l.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the database file to hold the committed pages", func() bool { return size() >= before+1<<20 })
	waitFor(t, 10*time.Second, "no WAL frame left to copy", func() bool {
		n, _ := histogram(t, e.m.CheckpointDuration)
		return n > 0 && testGauge(t, e.m.WALPendingFrames) == 0
	})
}
