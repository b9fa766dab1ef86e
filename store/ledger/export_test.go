package ledger

// MigrationsForTest returns the first n migrations, so that a test can build
// a database as an older binary left it.
func MigrationsForTest(n int) []string {
	out := make([]string, n)
	for v := 1; v <= n; v++ {
		out[v-1] = schema.SQL(v)
	}
	return out
}

// PruneQueryForTest is the query that picks the requests Prune removes.
const PruneQueryForTest = pruneQuery
