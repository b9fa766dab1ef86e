package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"ticketrelay/request"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/ticket"
)

// searchVersion is the schema version whose step adds the full-text index
// of the tickets. The only place the number is written: renumbering it
// renumbers the step.
const searchVersion = 17

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
		content='requests', content_rowid='id', tokenize='unicode61 remove_diacritics 2', detail=none);
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
	INSERT INTO tickets_fts (rowid, title, body, labels) SELECT id, title, body, labels FROM requests WHERE title <> '';`},
	// A search by fingerprint alone walks the tickets filed with it, newest
	// first. Partial: only fingerprinted creates pay for an entry, and a
	// query names the index's conditions (fingerprintTickets) to use it.
	{Version: searchByFingerprintVersion, SQL: `CREATE INDEX tickets_fingerprint ON requests(fingerprint, id) WHERE fingerprint <> '' AND kind = '';`}}

// searchByFingerprintVersion is the schema version of the step indexing
// fingerprinted tickets: the one place its number is written.
const searchByFingerprintVersion = 22

// fingerprintTickets are the conditions selecting the tickets filed with
// a fingerprint (bound as the next argument) through tickets_fingerprint,
// which the query names: without statistics the planner would take the
// console's index of every fingerprinted request, occurrences included.
const fingerprintTickets = "r.fingerprint = ? AND r.fingerprint <> '' AND r.kind = ''"

// matchExpr is the FTS5 query of a search's words (request.SearchWords):
// each word quoted, all of them required. Words hold only letters and
// digits, each one token of the index's tokenizer, so nothing of the
// user's text is FTS5 syntax.
func matchExpr(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = `"` + w + `"`
	}
	return strings.Join(quoted, " AND ")
}

// SearchTickets finds the tickets matching s among the MaxSearchDepth
// newest matches, ranked by where the words are (rank): in the title
// first, then the labels, then only the body; newest first among equals.
// The index is walked newest first and stops at the depth, so a word
// every ticket holds costs no more than a rare one. FTS5's own BM25 is
// not used: to weigh a word it counts every ticket that holds it, a scan
// that grows with the ledger (decision 0190).
func (l *Ledger) SearchTickets(ctx context.Context, s request.Search) (request.SearchPage, error) {
	if err := s.Check(); err != nil {
		return request.SearchPage{}, err
	}
	words, _ := request.SearchWords(s.Text) // checked above: none only with a fingerprint
	q, args := searchQuery(s, words)
	rows, err := l.db.Query(ctx, q, args...)
	if err != nil {
		return request.SearchPage{}, fmt.Errorf("ledger: search: %w", err)
	}
	var found []ranked
	for rows.Next() {
		var m ranked
		var title, labels string
		if err := rows.Scan(&m.id, &title, &labels); err != nil {
			rows.Close()
			return request.SearchPage{}, fmt.Errorf("ledger: search: %w", err)
		}
		m.score = rank(words, title, labels)
		found = append(found, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return request.SearchPage{}, fmt.Errorf("ledger: search: %w", err)
	}
	slices.SortStableFunc(found, func(a, b ranked) int { return cmp.Compare(b.score, a.score) }) // newest first among equals, as read
	var page request.SearchPage
	found = found[min(s.Offset, len(found)):]
	if len(found) > s.Limit {
		found, page.More = found[:s.Limit], true
	}
	for _, m := range found {
		h, err := l.hit(ctx, m.id, words)
		if errors.Is(err, sql.ErrNoRows) {
			continue // pruned since the walk
		}
		if err != nil {
			return request.SearchPage{}, fmt.Errorf("ledger: search: %w", err)
		}
		page.Hits = append(page.Hits, h)
	}
	return page, nil
}

// searchQuery is the statement reading the MaxSearchDepth newest matches
// of s (its words, or its fingerprint alone): each one's ledger row id,
// title and labels.
func searchQuery(s request.Search, words []string) (string, []any) {
	from, where, args := `tickets_fts f JOIN requests r ON r.id = f.rowid`, []string{"tickets_fts MATCH ?"}, []any{matchExpr(words)}
	order := "f.rowid"
	if len(words) == 0 {
		from, where, args, order = `requests r INDEXED BY tickets_fingerprint`, []string{fingerprintTickets}, []any{s.Fingerprint}, "r.id"
	} else if s.Fingerprint != "" {
		where, args = append(where, "r.fingerprint = ?"), append(args, s.Fingerprint)
	}
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
	return `SELECT ` + order + `, r.title, r.labels FROM ` + from + ` ` + join + `
		WHERE ` + strings.Join(where, " AND ") + ` ORDER BY ` + order + ` DESC LIMIT ?`, append(args, request.MaxSearchDepth)
}

// ranked is a match and its rank.
type ranked struct {
	id    int64
	score int
}

// rank scores a match by where the query's words are: a word in the title
// counts most, one in the labels less, one only in the body (every word
// is somewhere) least; among equals, the shorter title is the closer.
func rank(words []string, title, labels string) int {
	inTitle, inLabels := wordSet(title), wordSet(labels)
	score := 0
	for _, w := range words {
		w = strings.ToLower(w)
		switch {
		case inTitle[w]:
			score += 100
		case inLabels[w]:
			score += 50
		}
	}
	return score*10 - min(len(inTitle), 9)
}

func wordSet(text string) map[string]bool {
	set := map[string]bool{}
	for _, w := range request.TextWords(strings.ToLower(text)) {
		set[w] = true
	}
	return set
}

// hit reads the ticket of ledger row id, where it stands, and the snippet
// of its text around words.
func (l *Ledger) hit(ctx context.Context, id int64, words []string) (request.Hit, error) {
	var h request.Hit
	var row statusRow
	var body string
	err := l.db.QueryRow(ctx, `SELECT r.request_id, r.title, r.body, `+statusColumns+` `+statusJoins+` WHERE r.id = ?`, id).
		Scan(append([]any{&h.Report.Scoped, &h.Title, &body}, row.dest(&h.Report)...)...)
	if err == nil {
		err = row.readPublished(ctx, l.db.Reader())
	}
	if err != nil {
		return h, err
	}
	h.Snippet = snippet(body, words)
	if h.Snippet == "" {
		h.Snippet = snippet(h.Title, words)
	}
	h.Subject = row.caller.Subject
	h.Report.RequestID = strings.TrimPrefix(h.Report.Scoped, ticket.ScopedID(h.Subject, ""))
	row.fill(&h.Report)
	return h, nil
}

// snippetWords is how many words of the text a snippet shows.
const snippetWords = 16

// snippet is the fragment of text around the first of words it holds
// (any case), every one of words in it marked [so]; "" if it holds none.
// Without words it is the text's opening.
// Words are the runs of letters and digits, as the index splits them.
func snippet(text string, words []string) string {
	want := map[string]bool{}
	for _, w := range words {
		want[strings.ToLower(w)] = true
	}
	type span struct{ from, to int }
	var spans []span
	from := -1
	for i, r := range text + " " {
		word := unicode.IsLetter(r) || unicode.IsNumber(r)
		switch {
		case word && from < 0:
			from = i
		case !word && from >= 0:
			spans, from = append(spans, span{from, i}), -1
		}
	}
	first := slices.IndexFunc(spans, func(sp span) bool { return want[strings.ToLower(text[sp.from:sp.to])] })
	if len(words) == 0 && len(spans) > 0 {
		first = 0 // a search by fingerprint alone: the text's opening
	}
	if first < 0 {
		return ""
	}
	lo := max(0, first-snippetWords/4)
	hi := min(len(spans), lo+snippetWords)
	var b strings.Builder
	if lo > 0 {
		b.WriteString("…")
	}
	at := spans[lo].from
	for _, sp := range spans[lo:hi] {
		b.WriteString(oneLine(text[at:sp.from]))
		if w := text[sp.from:sp.to]; want[strings.ToLower(w)] {
			b.WriteString("[" + w + "]")
		} else {
			b.WriteString(w)
		}
		at = sp.to
	}
	if hi < len(spans) {
		b.WriteString("…")
	}
	return b.String()
}

// oneLine is the text between two words of a snippet, with line breaks
// as spaces.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, s)
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
