package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"ticketrelay/request"
	"ticketrelay/sqlitedb"
	"ticketrelay/ticket"
)

// searchVersion is the schema version whose step adds the full-text index
// of the tickets. The only place the number is written: renumbering it
// renumbers the step.
const searchVersion = 13

// searchMigrations index the tickets' title, body and labels for
// search_tickets (decision 0190). The index is an FTS5 table over the
// ledger rows (external content: the text is stored once, in requests),
// kept by triggers, so that every commit that writes a ticket writes its
// index entries in the same transaction, whoever writes it (the writer,
// the multi-host record's commit, a prefill). Rows without a title are no
// tickets and are not indexed. The last statement indexes the tickets a
// ledger of an earlier version already holds.
var searchMigrations = []sqlitedb.Step{{Version: searchVersion, SQL: `
	CREATE VIRTUAL TABLE tickets_fts USING fts5(title, body, labels,
		content='requests', content_rowid='id', tokenize='unicode61 remove_diacritics 2');
	CREATE TRIGGER tickets_fts_insert AFTER INSERT ON requests WHEN new.title <> '' BEGIN
		INSERT INTO tickets_fts (rowid, title, body, labels) VALUES (new.id, new.title, new.body, new.labels);
	END;
	CREATE TRIGGER tickets_fts_delete AFTER DELETE ON requests WHEN old.title <> '' BEGIN
		INSERT INTO tickets_fts (tickets_fts, rowid, title, body, labels) VALUES ('delete', old.id, old.title, old.body, old.labels);
	END;
	CREATE TRIGGER tickets_fts_update AFTER UPDATE OF title, body, labels ON requests BEGIN
		INSERT INTO tickets_fts (tickets_fts, rowid, title, body, labels)
			SELECT 'delete', old.id, old.title, old.body, old.labels WHERE old.title <> '';
		INSERT INTO tickets_fts (rowid, title, body, labels)
			SELECT new.id, new.title, new.body, new.labels WHERE new.title <> '';
	END;
	INSERT INTO tickets_fts (rowid, title, body, labels) SELECT id, title, body, labels FROM requests WHERE title <> '';`}}

// matchExpr is the FTS5 query of a search's words (request.SearchWords):
// each word quoted, all of them required. Words hold only letters and
// digits, so nothing of the user's text is FTS5 syntax.
func matchExpr(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = `"` + w + `"`
	}
	return strings.Join(quoted, " AND ")
}

// SearchTickets finds the tickets matching s, ranked by relevance (BM25,
// a title match weighing most, then labels, then the body) among the
// MaxSearchDepth newest matches.
func (l *Ledger) SearchTickets(ctx context.Context, s request.Search) (request.SearchPage, error) {
	if err := s.Check(); err != nil {
		return request.SearchPage{}, err
	}
	words, _ := request.SearchWords(s.Text) // checked above
	where, args := []string{"tickets_fts MATCH ?"}, []any{matchExpr(words)}
	if !s.Scope.All {
		where = append(where, "(r.subject = ? OR r.target IN (SELECT value FROM json_each(?)))")
		args = append(args, s.Scope.Subject, jsonList(s.Scope.Targets))
	}
	if s.Target != "" {
		where = append(where, "r.target = ?")
		args = append(args, s.Target)
	}
	join := ""
	if s.Status != request.SearchAnyStatus {
		join, where = "LEFT JOIN deliveries d ON d.id = r.id", append(where, statusConds[s.Status])
	}
	// The inner query walks the index newest first and stops at the depth;
	// only those matches are ranked and paged. One more than the page tells
	// whether another follows.
	q := `SELECT m.snip, r.request_id, r.title, ` + statusColumns + `
		FROM (SELECT f.rowid AS id, bm25(tickets_fts, 10.0, 1.0, 5.0) AS score,
				snippet(tickets_fts, -1, '[', ']', '…', 16) AS snip
			FROM tickets_fts f JOIN requests r ON r.id = f.rowid ` + join + `
			WHERE ` + strings.Join(where, " AND ") + `
			ORDER BY f.rowid DESC LIMIT ?) m
		CROSS JOIN requests r ON r.id = m.id LEFT JOIN deliveries d ON d.id = r.id
		ORDER BY m.score, m.id DESC LIMIT ? OFFSET ?`
	args = append(args, request.MaxSearchDepth, s.Limit+1, s.Offset)
	rows, err := l.db.Query(ctx, q, args...)
	if err != nil {
		return request.SearchPage{}, fmt.Errorf("ledger: search: %w", err)
	}
	var page request.SearchPage
	var found []statusRow
	for rows.Next() {
		var h request.Hit
		var row statusRow
		if err := rows.Scan(append([]any{&h.Snippet, &h.Report.Scoped, &h.Title}, row.dest(&h.Report)...)...); err != nil {
			rows.Close()
			return request.SearchPage{}, fmt.Errorf("ledger: search: %w", err)
		}
		h.Subject = row.caller.Subject
		h.Report.RequestID = strings.TrimPrefix(h.Report.Scoped, ticket.ScopedID(h.Subject, ""))
		page.Hits, found = append(page.Hits, h), append(found, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return request.SearchPage{}, fmt.Errorf("ledger: search: %w", err)
	}
	if len(page.Hits) > s.Limit {
		page.Hits, found, page.More = page.Hits[:s.Limit], found[:s.Limit], true
	}
	for i := range page.Hits {
		if err := found[i].readPublished(ctx, l.db.Reader()); err != nil {
			return request.SearchPage{}, fmt.Errorf("ledger: search: %w", err)
		}
		found[i].fill(&page.Hits[i].Report)
	}
	return page, nil
}

// statusConds select the tickets of a SearchStatus by their delivery
// record, as request.Report.Settle derives the status from it.
var statusConds = map[request.SearchStatus]string{
	request.SearchPending:   "(d.state IS NULL OR d.state IN ('" + request.DeliveryAttempting + "', '" + string(request.StatusRetrying) + "'))",
	request.SearchDelivered: "d.state = '" + string(request.StatusDelivered) + "'",
	request.SearchFailed:    "d.state = '" + string(request.StatusFailed) + "'",
	request.SearchUncertain: "d.state = '" + string(request.StatusUncertain) + "'",
}

func jsonList(items []string) string {
	b, _ := json.Marshal(append([]string{}, items...)) // strings always encode
	return string(b)
}
