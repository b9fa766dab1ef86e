package ledger

// SearchVersionForTest is the schema version that adds the tickets'
// full-text index.
const SearchVersionForTest = searchVersion

// SnippetForTest is the snippet of a search hit's text.
var SnippetForTest = snippet
