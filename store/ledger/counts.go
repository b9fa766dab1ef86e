package ledger

import "ticketrelay/store/sqlitedb"

// countsMigrations keep each target's requests counted by where they
// stand, in request_counts, updated by triggers in the transaction of
// every write to requests and deliveries: the overview and status read a
// few rows instead of the whole ledger (see docs/decisions/0153). The
// step fills the table once from the ledger as it is.
//
// A request's count is "waiting" while it has no delivery record, then
// its delivery record's state, "retrying" for an attempt that ended
// without a known outcome and waits for its lookup (as find_request
// reports it). A delivery record counts under its own target, a waiting
// request under its request's, as the count over the whole ledger did.
var countsMigrations = []sqlitedb.Step{{Version: ConsoleSchemaVersion, SQL: `CREATE TABLE request_counts (
		target TEXT NOT NULL,
		shown  TEXT NOT NULL,
		n      INTEGER NOT NULL,
		PRIMARY KEY (target, shown)
	) WITHOUT ROWID;
	INSERT INTO request_counts (target, shown, n) SELECT target, shown, count(*) FROM (
		SELECT target, ` + shownOf("deliveries") + ` AS shown FROM deliveries
		UNION ALL
		SELECT r.target, 'waiting' FROM requests r LEFT JOIN deliveries d ON d.id = r.id WHERE d.id IS NULL
	) GROUP BY target, shown;

	CREATE TRIGGER request_counts_request_in AFTER INSERT ON requests
		WHEN NOT EXISTS (SELECT 1 FROM deliveries WHERE id = NEW.id)
	BEGIN
		` + countUp("NEW.target", "'waiting'") + `
	END;
	CREATE TRIGGER request_counts_request_out AFTER DELETE ON requests
		WHEN NOT EXISTS (SELECT 1 FROM deliveries WHERE id = OLD.id)
	BEGIN
		` + countDown("OLD.target", "'waiting'") + `
	END;
	CREATE TRIGGER request_counts_request_target AFTER UPDATE OF target ON requests
		WHEN OLD.target != NEW.target AND NOT EXISTS (SELECT 1 FROM deliveries WHERE id = NEW.id)
	BEGIN
		` + countDown("OLD.target", "'waiting'") + `
		` + countUp("NEW.target", "'waiting'") + `
	END;
	CREATE TRIGGER request_counts_delivery_in AFTER INSERT ON deliveries
	BEGIN
		` + countUp("NEW.target", shownOf("NEW")) + `
		UPDATE request_counts SET n = n - 1 WHERE shown = 'waiting' AND target = (SELECT target FROM requests WHERE id = NEW.id);
	END;
	CREATE TRIGGER request_counts_delivery_change AFTER UPDATE OF target, state, next_attempt_at ON deliveries
		WHEN OLD.target != NEW.target OR ` + shownOf("OLD") + ` != ` + shownOf("NEW") + `
	BEGIN
		` + countDown("OLD.target", shownOf("OLD")) + `
		` + countUp("NEW.target", shownOf("NEW")) + `
	END;
	CREATE TRIGGER request_counts_delivery_out AFTER DELETE ON deliveries
	BEGIN
		` + countDown("OLD.target", shownOf("OLD")) + `
		INSERT INTO request_counts (target, shown, n) SELECT target, 'waiting', 1 FROM requests WHERE id = OLD.id
			ON CONFLICT (target, shown) DO UPDATE SET n = n + 1;
	END;`}}

// shownOf is the count a delivery record row (a table or NEW, OLD)
// counts under.
func shownOf(row string) string {
	return `(CASE WHEN ` + row + `.state = 'attempting' AND ` + row + `.next_attempt_at IS NOT NULL THEN 'retrying' ELSE ` + row + `.state END)`
}

func countUp(target, shown string) string {
	return `INSERT INTO request_counts (target, shown, n) VALUES (` + target + `, ` + shown + `, 1)
			ON CONFLICT (target, shown) DO UPDATE SET n = n + 1;`
}

func countDown(target, shown string) string {
	return `UPDATE request_counts SET n = n - 1 WHERE target = ` + target + ` AND shown = ` + shown + `;`
}
