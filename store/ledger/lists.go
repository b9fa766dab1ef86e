package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"ticketrelay/request"
	"ticketrelay/ticket"
)

// The console's lists (decisions 0154, 0156). A page is read newest first
// by id, from the range of one index that holds every row it can show
// (its driver: a status, a subject, a fingerprint, a target, the words of
// the text, a request id, the id itself); the other filters are checked
// on the rows of that range. When a filter could drive, each candidate's
// range is counted up to estimateCap index entries and the smallest
// drives, so that a rare match is found by the index that holds it, not
// by walking the common one. A time range is an id range (the ids of the
// requests accepted in order grow with their time) read from whichever
// index drives, merged with the requests accepted out of order in it.

// estimateCap bounds the index entries read to compare two drivers: past
// it, both are large and the first listCandidates lists drives.
const estimateCap = 2000

// listFamily is what the ledger's list and the cluster copy's differ in:
// the table of requests (aliased r), its full-text index, the table of
// its requests accepted out of order, and how a status reads.
type listFamily struct {
	table, fts, late string
	// cols are the columns after the key, those of a RequestRow read by
	// listPage (and, for the copy, its extra ones).
	cols string
	// statusDrivers are the parts that read the status s (of target, if
	// given) from its index.
	statusDrivers func(s, target string) []listPart
	// statusJoin is the join of the delivery records, for a part driven
	// by a request's index, and the condition that keeps status s.
	statusJoin func(s string) (join string, cond string, args []any)
	// targetCond is the condition of a target, under status s.
	targetCond func(s string) string
	indexes    map[string]string // filter → index name, of the requests table
}

var ledgerFamily = listFamily{
	table: "requests", fts: "tickets_fts", late: "requests_late",
	cols: `r.request_id, r.subject, r.ticket_id, r.target, r.title, r.created_at,
		d.state, d.next_attempt_at IS NOT NULL, coalesce(d.attempts, 0), coalesce(d.last_error, ''), coalesce(d.updated_at, 0)`,
	statusDrivers: func(s, target string) []listPart {
		if s == ListWaiting {
			p := listPart{drive: "undelivered u", key: "u.id", joins: `CROSS JOIN requests r ON r.id = u.id LEFT JOIN deliveries d ON d.id = u.id`}
			if target != "" {
				p.drive = "undelivered u INDEXED BY undelivered_target"
				p.cond(`u.target = ?`, target)
			}
			return []listPart{p}
		}
		base := listPart{drive: "deliveries d INDEXED BY deliveries_state_id", key: "d.id", joins: `CROSS JOIN requests r ON r.id = d.id`}
		if target != "" {
			base.drive = "deliveries d INDEXED BY deliveries_state"
		}
		return stateParts(base, s, target, "d.")
	},
	statusJoin: func(s string) (string, string, []any) {
		switch s {
		case ListAll:
			return `LEFT JOIN deliveries d ON d.id = r.id`, "", nil
		case ListWaiting:
			return `LEFT JOIN deliveries d ON d.id = r.id`, `d.id IS NULL`, nil
		}
		c, a := stateCond(s, "d.")
		return `CROSS JOIN deliveries d ON d.id = r.id`, c, a
	},
	targetCond: func(s string) string {
		if s == ListAll || s == ListWaiting {
			return `r.target = ?`
		}
		return `d.target = ?` // a delivery record's own target
	},
	indexes: map[string]string{"subject": "requests_subject", "target": "requests_target",
		"fingerprint": "requests_fingerprint", "request_id": ""},
}

var clusterFamily = listFamily{
	table: "cluster_requests", fts: "cluster_fts", late: "cluster_late",
	cols: `r.request_id, r.subject, r.ticket_id, r.target, r.title, r.created_at, r.state, r.next_attempt_at IS NOT NULL,
		r.attempts, r.last_error, r.updated_at, r.host, r.phase`,
	statusDrivers: func(s, target string) []listPart {
		base := listPart{drive: "cluster_requests r INDEXED BY cluster_requests_state", key: "r.id"}
		if target != "" {
			base.drive = "cluster_requests r INDEXED BY cluster_requests_state_target"
		}
		if s == ListWaiting {
			base.filter(`r.phase = 'accepted'`)
		}
		return stateParts(base, s, target, "r.")
	},
	statusJoin: func(s string) (string, string, []any) {
		if s == ListWaiting {
			return "", `r.state IS NULL AND r.phase = 'accepted'`, nil
		}
		c, a := stateCond(s, "r.")
		return "", c, a
	},
	targetCond: func(string) string { return `r.target = ?` },
	indexes: map[string]string{"subject": "cluster_requests_subject", "target": "cluster_requests_target",
		"fingerprint": "cluster_requests_fingerprint", "request_id": "cluster_requests_request_id"},
}

// stateParts are base read over each range of status s (of target, if
// given) of a state index whose table's columns prefix names.
func stateParts(base listPart, s, target, prefix string) []listPart {
	var parts []listPart
	for _, c := range stateRanges(s, prefix) {
		p := base.clone()
		p.cond(c.cond, c.args...)
		if target != "" {
			p.cond(prefix+`target = ?`, target)
		}
		parts = append(parts, p)
	}
	return parts
}

// stateRanges are the ranges of a state index (prefix names its table's
// columns) whose rows have list status s: one each, or two for
// retrying, read apart and merged so that no page sorts (0154).
func stateRanges(s, prefix string) []struct {
	cond string
	args []any
} {
	type rng = struct {
		cond string
		args []any
	}
	switch s {
	case ListWaiting:
		return []rng{{prefix + `state IS NULL`, nil}}
	case ListInFlight:
		return []rng{{prefix + `state = ? AND ` + prefix + `next_attempt_at IS NULL`, []any{request.DeliveryAttempting}}}
	case string(request.StatusRetrying):
		// An attempt that ended without a known outcome and waits for its
		// lookup is retrying, as find_request and status report it.
		return []rng{{prefix + `state = ?`, []any{string(request.StatusRetrying)}},
			{prefix + `state = ? AND ` + prefix + `next_attempt_at IS NOT NULL`, []any{request.DeliveryAttempting}}}
	}
	return []rng{{prefix + `state = ?`, []any{s}}}
}

// stateCond is the condition, on a row read by another index, that its
// list status is s ("" for every status).
func stateCond(s, prefix string) (string, []any) {
	switch s {
	case ListAll:
		return "", nil
	case ListWaiting:
		return prefix + `state IS NULL`, nil
	case string(request.StatusRetrying):
		return `(` + prefix + `state = ? OR (` + prefix + `state = ? AND ` + prefix + `next_attempt_at IS NOT NULL))`,
			[]any{string(request.StatusRetrying), request.DeliveryAttempting}
	}
	r := stateRanges(s, prefix)[0]
	return r.cond, r.args
}

// listPart is one SELECT of a page: the rows of drive's index range
// (conds), joined, that pass the filters, newest first by key, the
// driving table's id.
type listPart struct {
	drive, key, joins string
	conds, filters    []string
	args, fargs       []any
}

func (p *listPart) cond(c string, a ...any) {
	p.conds, p.args = append(p.conds, c), append(p.args, a...)
}
func (p *listPart) filter(c string, a ...any) {
	p.filters, p.fargs = append(p.filters, c), append(p.fargs, a...)
}

func (p listPart) clone() listPart {
	p.conds, p.args = slices.Clone(p.conds), slices.Clone(p.args)
	p.filters, p.fargs = slices.Clone(p.filters), slices.Clone(p.fargs)
	return p
}

// listQuery is a page's statement: its parts, merged by their first
// column, the key.
type listQuery struct {
	cols  string
	parts []listPart
}

// sql is the statement and its arguments for a page of limit rows (one
// more is read, to know whether a next page exists).
func (q listQuery) sql(limit int) (string, []any) {
	var selects []string
	var args []any
	for _, p := range q.parts {
		s := `SELECT ` + p.key + `, ` + q.cols + ` FROM ` + p.drive + ` ` + p.joins
		if w := slices.Concat(p.conds, p.filters); len(w) > 0 {
			s += ` WHERE ` + strings.Join(w, ` AND `)
		}
		selects, args = append(selects, s), slices.Concat(args, p.args, p.fargs)
	}
	return strings.Join(selects, ` UNION ALL `) + ` ORDER BY 1 DESC LIMIT ?`, append(args, limit+1)
}

// listBounds are what a filter needs read before its query is built:
// the id range of the requests accepted in order within its time range,
// and whether its text is a request id.
type listBounds struct {
	lo, hi    int64 // ids: lo ≤ id ≤ hi; lo > hi: none
	requestID string
}

var allIDs = listBounds{lo: 0, hi: math.MaxInt64}

// listCandidates are the queries that can read f's page (a filter check
// passed), one per index that can drive it, each checking the other
// filters on its rows; the first in rank order, then, are the likelier to
// be small.
func (fam listFamily) listCandidates(f RequestFilter, b listBounds, words []string) []listQuery {
	timed := !f.From.IsZero() || !f.To.IsZero()
	// filters adds every filter but the driver's own to p.
	filters := func(p *listPart, driver string) {
		if driver != "status" {
			join, c, a := fam.statusJoin(f.Status)
			if join != "" && p.key != "d.id" && p.key != "u.id" {
				p.joins += " " + join
			}
			if c != "" {
				p.filter(c, a...)
			}
		}
		if f.Target != "" && driver != "target" && driver != "status" {
			p.filter(fam.targetCond(f.Status), f.Target)
		}
		if f.Subject != "" && driver != "subject" {
			p.filter(`r.subject = ?`, f.Subject)
		}
		if f.Fingerprint != "" && driver != "fingerprint" {
			p.filter(`r.fingerprint = ?`, f.Fingerprint)
		}
		switch {
		case b.requestID != "" && driver != "request_id":
			p.filter(`r.request_id = ?`, b.requestID)
		case len(words) > 0 && driver != "text":
			p.filter(`EXISTS (SELECT 1 FROM `+fam.fts+` WHERE `+fam.fts+` MATCH ? AND rowid = r.id)`, matchExpr(words))
		}
		if !f.From.IsZero() {
			p.filter(`r.created_at >= ?`, f.From.UnixNano())
		}
		if !f.To.IsZero() {
			p.filter(`r.created_at < ?`, f.To.UnixNano())
		}
	}
	// bound limits a part to the page's start and the time range's ids.
	bound := func(p *listPart) {
		if timed {
			p.cond(p.key+` BETWEEN ? AND ?`, b.lo, b.hi)
		}
		if f.Before > 0 {
			p.cond(p.key+` < ?`, f.Before)
		}
	}
	byIndex := func(driver, cond string, a ...any) listQuery {
		p := listPart{drive: fam.table + " r", key: "r.id"}
		if ix := fam.indexes[driver]; ix != "" {
			p.drive += " INDEXED BY " + ix
		}
		if driver == "all" {
			p.drive += " NOT INDEXED" // the rowid: the id range
		}
		if cond != "" {
			p.cond(cond, a...)
		}
		bound(&p)
		filters(&p, driver)
		return listQuery{cols: fam.cols, parts: []listPart{p}}
	}
	var out []listQuery
	switch {
	case b.requestID != "":
		out = append(out, byIndex("request_id", `r.request_id = ?`, b.requestID))
	default:
		if f.Fingerprint != "" {
			out = append(out, byIndex("fingerprint", `r.fingerprint = ? AND r.fingerprint != ''`, f.Fingerprint))
		}
		if len(words) > 0 {
			p := listPart{drive: fam.fts + " f", key: "f.rowid", joins: "CROSS JOIN " + fam.table + " r ON r.id = f.rowid"}
			p.cond(fam.fts+` MATCH ?`, matchExpr(words))
			bound(&p)
			filters(&p, "text")
			out = append(out, listQuery{cols: fam.cols, parts: []listPart{p}})
		}
		if f.Subject != "" {
			out = append(out, byIndex("subject", `r.subject = ?`, f.Subject))
		}
		if f.Status != ListAll {
			q := listQuery{cols: fam.cols}
			for _, p := range fam.statusDrivers(f.Status, f.Target) {
				bound(&p)
				filters(&p, "status")
				q.parts = append(q.parts, p)
			}
			out = append(out, q)
		} else if f.Target != "" {
			out = append(out, byIndex("target", `r.target = ?`, f.Target))
		}
		if len(out) == 0 {
			out = append(out, byIndex("all", ""))
		}
	}
	if b.lo > b.hi {
		for i := range out {
			out[i].parts = nil
		}
	}
	if timed {
		// The requests accepted out of order whose time is in the range
		// and whose id is not: few, walked whole.
		p := listPart{drive: fam.late + " late", key: "late.id", joins: "CROSS JOIN " + fam.table + " r ON r.id = late.id"}
		if !f.From.IsZero() {
			p.cond(`late.created_at >= ?`, f.From.UnixNano())
		}
		if !f.To.IsZero() {
			p.cond(`late.created_at < ?`, f.To.UnixNano())
		}
		if b.lo <= b.hi {
			p.cond(`late.id NOT BETWEEN ? AND ?`, b.lo, b.hi)
		}
		if f.Before > 0 {
			p.cond(`late.id < ?`, f.Before)
		}
		filters(&p, "")
		for i := range out {
			out[i].parts = append(out[i].parts, p)
		}
	}
	return out
}

// check refuses a filter no page can answer, before anything is read.
func (fam listFamily) check(f RequestFilter) error {
	if f.Limit <= 0 || f.Limit > 500 {
		return fmt.Errorf("ledger: list requests: a page is 1 to 500 rows, not %d", f.Limit)
	}
	if !slices.Contains(listStatusNames, f.Status) {
		return fmt.Errorf("ledger: list requests: no status %q (all, waiting, in_flight, retrying, failed, uncertain, delivered)", f.Status)
	}
	return nil
}

var listStatusNames = []string{ListAll, ListWaiting, ListInFlight, string(request.StatusRetrying),
	string(request.StatusFailed), string(request.StatusUncertain), string(request.StatusDelivered)}

// bounds reads what f's query needs first: the ids of its time range and
// whether its text names a request (scoped as the list shows it, or in
// f's subject); and the words of a text that names none.
func (l *Ledger) bounds(ctx context.Context, fam listFamily, f RequestFilter) (listBounds, []string, error) {
	b := allIDs
	db := l.db.Reader()
	if f.Text != "" {
		for _, id := range slices.Compact([]string{f.Text, ticket.ScopedID(f.Subject, f.Text)}) {
			var found string
			err := db.QueryRowContext(ctx, `SELECT request_id FROM `+fam.table+` WHERE request_id = ? LIMIT 1`, id).Scan(&found)
			if err == nil {
				b.requestID = found
				break
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return b, nil, fmt.Errorf("ledger: list requests: %w", err)
			}
		}
	}
	var words []string
	if f.Text != "" && b.requestID == "" {
		var err error
		if words, err = request.SearchWords(f.Text); err != nil {
			return b, nil, fmt.Errorf("ledger: list requests: text: neither a request id nor words to look for: %w", err)
		}
	}
	// The first and the last request accepted in order within the range:
	// every other one accepted in order is between them.
	if !f.From.IsZero() {
		err := db.QueryRowContext(ctx, `SELECT id FROM `+fam.table+` WHERE created_at >= ? AND id NOT IN (SELECT id FROM `+fam.late+`)
			ORDER BY created_at, id LIMIT 1`, f.From.UnixNano()).Scan(&b.lo)
		if errors.Is(err, sql.ErrNoRows) {
			b.lo = math.MaxInt64
		} else if err != nil {
			return b, nil, fmt.Errorf("ledger: list requests: %w", err)
		}
	}
	if !f.To.IsZero() {
		err := db.QueryRowContext(ctx, `SELECT id FROM `+fam.table+` WHERE created_at < ? AND id NOT IN (SELECT id FROM `+fam.late+`)
			ORDER BY created_at DESC, id DESC LIMIT 1`, f.To.UnixNano()).Scan(&b.hi)
		if errors.Is(err, sql.ErrNoRows) {
			b.hi = -1
		} else if err != nil {
			return b, nil, fmt.Errorf("ledger: list requests: %w", err)
		}
	}
	return b, words, nil
}

// listQueryFor is the query of f's page: its candidates' smallest.
func (l *Ledger) listQueryFor(ctx context.Context, fam listFamily, f RequestFilter) (listQuery, error) {
	if err := fam.check(f); err != nil {
		return listQuery{}, err
	}
	b, words, err := l.bounds(ctx, fam, f)
	if err != nil {
		return listQuery{}, err
	}
	cands := fam.listCandidates(f, b, words)
	if len(cands) == 1 {
		return cands[0], nil
	}
	best, bestN := 0, int64(math.MaxInt64)
	for i, c := range cands {
		n, err := l.estimate(ctx, c)
		if err != nil {
			return listQuery{}, err
		}
		if n < bestN {
			best, bestN = i, n
		}
	}
	return cands[best], nil
}

// estimate counts the index entries of q's driving ranges, up to
// estimateCap each.
func (l *Ledger) estimate(ctx context.Context, q listQuery) (int64, error) {
	var total int64
	for _, p := range q.parts {
		if strings.HasSuffix(p.key, "late.id") {
			continue // the same in every candidate
		}
		s := `SELECT count(*) FROM (SELECT 1 FROM ` + p.drive
		if len(p.conds) > 0 {
			s += ` WHERE ` + strings.Join(p.conds, ` AND `)
		}
		var n int64
		if err := l.db.Reader().QueryRowContext(ctx, s+` LIMIT ?)`, append(slices.Clone(p.args), estimateCap)...).Scan(&n); err != nil {
			return 0, fmt.Errorf("ledger: list requests: estimate: %w", err)
		}
		total += n
	}
	return total, nil
}
