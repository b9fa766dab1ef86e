package ledger

// SearchVersionForTest is the schema version that adds the tickets'
// full-text index.
const SearchVersionForTest = searchVersion
