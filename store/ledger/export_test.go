package ledger

// PruneQueryForTest is the query that picks the requests Prune removes.
const PruneQueryForTest = pruneQuery
