package config

// SearchTicketsTool is the built-in search tool every grant includes, as
// it does find_request: what a caller finds with it follows from its
// grants (SearchScope), so a grant of it alone reveals nothing.
const SearchTicketsTool = "search_tickets"

// Search scopes: which tickets search_tickets finds (decision 0190).
const (
	// SearchScopeTargets (the default): the caller's own tickets and every
	// ticket filed to a target it may file to, so that the agents of a
	// team find each other's tickets where they would file a duplicate.
	SearchScopeTargets = "targets"
	// SearchScopeOwn: every caller finds only its own tickets, with
	// grants or without, for installations whose callers must not see
	// each other's (customers filing to one help desk).
	SearchScopeOwn = "own"
)

// validateSearch checks the search_scope key.
func (f *File) validateSearch(at spots, ps *problems) {
	switch f.SearchScope {
	case "", SearchScopeTargets, SearchScopeOwn:
		return
	}
	ps.add(at.top["search_scope"], "search_scope %q: use %q (a caller finds the tickets of the targets it may file to, and its own) or %q (its own only)",
		f.SearchScope, SearchScopeTargets, SearchScopeOwn)
}
