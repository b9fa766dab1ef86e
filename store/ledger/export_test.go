package ledger

import "ticketrelay/request"

// PruneQueryForTest is the query that picks the requests Prune removes.
const PruneQueryForTest = pruneQuery

// ListQueryForTest is the statement and arguments of a page of the
// ledger's list (or of the cluster copy's) for f.
func ListQueryForTest(f RequestFilter, cluster bool) (string, []any, error) {
	build := listRequestsQuery
	if cluster {
		build = listClusterQuery
	}
	q, err := build(f)
	if err != nil {
		return "", nil, err
	}
	s, args := q.sql(f.Limit)
	return s, args, nil
}

// ActionsQueryForTest reads the comments and updates on a create (its
// scoped id, then a limit).
const ActionsQueryForTest = actionsQuery

// SearchQueryForTest is the statement and arguments of a search's walk.
func SearchQueryForTest(s request.Search) (string, []any) {
	words, _ := request.SearchWords(s.Text)
	return searchQuery(s, words)
}
