package ledger

import (
	"context"
	"fmt"
	"slices"

	"ticketrelay/store/sqlitedb"
)

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

func countUp(target, shown string) string { return countIn("request_counts", target, shown) }

func countDown(target, shown string) string { return countOut("request_counts", target, shown) }

// countIn and countOut add a request to a counts table, and take it away.
func countIn(table, target, shown string) string {
	return `INSERT INTO ` + table + ` (target, shown, n) VALUES (` + target + `, ` + shown + `, 1)
			ON CONFLICT (target, shown) DO UPDATE SET n = n + 1;`
}

func countOut(table, target, shown string) string {
	return `UPDATE ` + table + ` SET n = n - 1 WHERE target = ` + target + ` AND shown = ` + shown + `;`
}

// ClusterCountsVersion is the ledger's migration for the counts of the
// cluster record's copy: the one place its number is written.
const ClusterCountsVersion = 21

// clusterCountsMigrations keep the copy's requests (every host's, see
// clusterrec.Copy) counted by target and where they stand, in
// cluster_counts, as request_counts counts the ledger's: by triggers on
// cluster_requests, in the transaction that folds the records, so the
// counts are exactly the copy's at every commit (see docs/decisions/0155).
// A record without a delivery record counts as waiting once its host
// accepted it, as claimed before. The index by state and target serves
// each target's last error and a status's list of one target.
var clusterCountsMigrations = []sqlitedb.Step{{Version: ClusterCountsVersion, SQL: `CREATE TABLE cluster_counts (
		target TEXT NOT NULL,
		shown  TEXT NOT NULL,
		n      INTEGER NOT NULL,
		PRIMARY KEY (target, shown)
	) WITHOUT ROWID;
	INSERT INTO cluster_counts (target, shown, n) SELECT target, ` + clusterShownOf("cluster_requests") + `, count(*)
		FROM cluster_requests GROUP BY 1, 2;
	CREATE INDEX cluster_requests_state_target ON cluster_requests(state, target, id);

	CREATE TRIGGER cluster_counts_in AFTER INSERT ON cluster_requests
	BEGIN
		` + countIn("cluster_counts", "NEW.target", clusterShownOf("NEW")) + `
	END;
	CREATE TRIGGER cluster_counts_change AFTER UPDATE OF target, state, next_attempt_at, phase ON cluster_requests
		WHEN OLD.target != NEW.target OR ` + clusterShownOf("OLD") + ` != ` + clusterShownOf("NEW") + `
	BEGIN
		` + countOut("cluster_counts", "OLD.target", clusterShownOf("OLD")) + `
		` + countIn("cluster_counts", "NEW.target", clusterShownOf("NEW")) + `
	END;
	CREATE TRIGGER cluster_counts_out AFTER DELETE ON cluster_requests
	BEGIN
		` + countOut("cluster_counts", "OLD.target", clusterShownOf("OLD")) + `
	END;`}}

// clusterShownOf is the count a row of cluster_requests (or NEW, OLD)
// counts under: its delivery record's, as shownOf; without one, waiting
// once accepted, else claimed (ListClaimed).
func clusterShownOf(row string) string {
	return `(CASE WHEN ` + row + `.state IS NULL THEN (CASE WHEN ` + row + `.phase = 'accepted' THEN 'waiting' ELSE '` + ListClaimed + `' END) ELSE ` +
		shownOf(row) + ` END)`
}

// ClusterCounts is Counts for the whole installation: each target's
// requests by where they stand are the copy's of the cluster record
// (every host's), kept on write; the backlog and the running dispatchers
// stay this host's. A claimed record is not counted: no host accepted it
// (yet).
func (l *Ledger) ClusterCounts(ctx context.Context) (Summary, error) {
	s, err := l.Counts(ctx)
	if err != nil {
		return s, err
	}
	counts, err := l.countByTarget(ctx, "cluster_counts")
	if err != nil {
		return s, fmt.Errorf("ledger: summarize the cluster copy: %w", err)
	}
	// A target only other hosts' requests name is not in this host's
	// presence: it cannot tell whether a dispatcher serves it, and says
	// nothing rather than "not served".
	served := map[string]bool{}
	for _, t := range s.Targets {
		counts.of(t.Target)
		served[t.Target] = t.Served
	}
	slices.Sort(counts.order)
	s.Targets = nil
	for _, t := range counts.order {
		tc := counts.byTarget[t]
		known, ok := served[t]
		tc.Served = known || !ok
		s.Targets = append(s.Targets, *tc)
	}
	return s, nil
}
