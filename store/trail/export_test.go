package trail

// QueryForTest is the statement Query runs for f, for its query plan.
func QueryForTest(f Filter) (string, []any) { return queryRows(f) }
