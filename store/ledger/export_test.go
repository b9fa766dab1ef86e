package ledger

import (
	"strings"

	"ticketrelay/request"
)

// PruneQueryForTest is the query that picks the requests Prune removes.
const PruneQueryForTest = pruneQuery

// ListQueriesForTest are the statements and arguments of every query
// that can read a page of the ledger's list (or of the cluster copy's)
// for f: one per index that can drive it. A time range reads as the id
// range lo..hi; text is a request id if requestID, else words.
func ListQueriesForTest(f RequestFilter, cluster, requestID bool, lo, hi int64) ([]string, [][]any, error) {
	fam := ledgerFamily
	if cluster {
		fam = clusterFamily
	}
	b := listBounds{lo: lo, hi: hi}
	var words []string
	if f.Text != "" && requestID {
		b.requestID = f.Text
	} else if f.Text != "" {
		words = strings.Fields(f.Text)
	}
	if err := fam.check(f); err != nil {
		return nil, nil, err
	}
	var qs []string
	var args [][]any
	for _, c := range fam.listCandidates(f, b, words) {
		s, a := c.sql(f.Limit)
		qs, args = append(qs, s), append(args, a)
	}
	return qs, args, nil
}

// ActionsQueryForTest reads the comments and updates on a create (its
// scoped id, then a limit).
const ActionsQueryForTest = actionsQuery

// SearchQueryForTest is the statement and arguments of a search's walk.
func SearchQueryForTest(s request.Search) (string, []any) {
	words, _ := request.SearchWords(s.Text)
	return searchQuery(s, words)
}

// TicketOfQueryForTest reads the create a reference names (subject, ref,
// scoped id).
const TicketOfQueryForTest = ticketOfQuery
