package sqlitedb_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"ticketrelay/store/sqlitedb"
)

// Steps of several owners run in version order, and within a version in
// the order of the owners; a gap in the versions is refused.
func TestMergeOrdersByVersionThenOwner(t *testing.T) {
	a := []sqlitedb.Step{{Version: 1, SQL: "a1"}, {Version: 3, SQL: "a3"}}
	b := []sqlitedb.Step{{Version: 1, SQL: "b1"}, {Version: 2, SQL: "b2"}}
	seq, err := sqlitedb.Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if seq.Len() != 3 || seq.SQL(1) != "a1\nb1" || seq.SQL(2) != "b2" || seq.SQL(3) != "a3" {
		t.Fatalf("Merge = %v", seq)
	}
	if _, err := sqlitedb.Merge([]sqlitedb.Step{{Version: 1, SQL: "x"}, {Version: 3, SQL: "y"}}); err == nil {
		t.Fatal("Merge accepted a sequence without version 2")
	}
}

// Up runs only the versions a file lacks, records the new version, and
// refuses a file newer than the sequence.
func TestUpRunsWhatTheFileLacks(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	up := func(seq sqlitedb.Sequence) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := seq.Up(ctx, tx); err != nil {
			return err
		}
		return tx.Commit()
	}
	owner := []sqlitedb.Step{{Version: 1, SQL: "CREATE TABLE t (n INTEGER)"}, {Version: 2, SQL: "INSERT INTO t VALUES (2)"}}
	if err := up(sqlitedb.MustMerge(owner[:1])); err != nil {
		t.Fatal(err)
	}
	if err := up(sqlitedb.MustMerge(owner)); err != nil {
		t.Fatal(err)
	}
	if err := up(sqlitedb.MustMerge(owner)); err != nil { // nothing left to run: the insert runs once
		t.Fatal(err)
	}
	var rows, version int
	if err := db.QueryRow("SELECT count(*) FROM t").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d rows, %v; want the insert of version 2 run once", rows, err)
	}
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil || version != 2 {
		t.Fatalf("user_version %d, %v; want 2", version, err)
	}
	if err := up(sqlitedb.MustMerge(owner[:1])); err == nil {
		t.Fatal("a file at version 2 was migrated by a sequence of 1")
	}
}
