package sqlitedb

import "fmt"

// Hooks for the writer tests in package sqlitedb_test: they let a test see
// operations waiting in the queue and the closed flag without sleeping.

// QueuedForTest reports how many submitted operations wait for the writer.
func (w *Writer) QueuedForTest() int { return len(w.jobs) }

// ClosedForTest reports whether Close has stopped accepting work.
func (w *Writer) ClosedForTest() bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.closed
}

// LimitPagesForTest caps the database at n pages on the write connection, so
// that a test can fill the "disk" (SQLITE_FULL) without filling the disk.
func (db *DB) LimitPagesForTest(n int) error {
	_, err := db.write.Exec(fmt.Sprintf("PRAGMA max_page_count = %d", n))
	return err
}
