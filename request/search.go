package request

import (
	"fmt"
	"strings"
	"unicode"
)

// Limits of a search of the tickets (search_tickets).
const (
	MaxSearchQueryLen = 500 // bytes of the query text
	MaxSearchWords    = 16  // words of the query
	MaxSearchLimit    = 50  // results per page
	// MaxSearchDepth is how many of the newest matches a store ranks: a
	// query's cost stays bounded however many tickets a common word
	// matches, and a duplicate is most likely among the recent ones.
	MaxSearchDepth = 500
)

// SearchStatus filters a search by where its tickets stand.
type SearchStatus string

const (
	SearchAnyStatus SearchStatus = ""
	SearchPending   SearchStatus = "pending" // queued, published or retrying: not settled
	SearchDelivered SearchStatus = "delivered"
	SearchFailed    SearchStatus = "failed"
	SearchUncertain SearchStatus = "uncertain"
)

// SearchStatuses are the SearchStatus values a caller may name.
var SearchStatuses = []SearchStatus{SearchPending, SearchDelivered, SearchFailed, SearchUncertain}

// Search is a query of the tickets: every word of Text, among the tickets
// a caller may see (Scope), filtered by Target, Status and Fingerprint;
// one page of Limit results from Offset. Text may be empty when a
// Fingerprint is given: then every ticket filed with it, newest first.
type Search struct {
	Text   string
	Scope  SearchScope
	Target string       // "": every target
	Status SearchStatus // "": any
	// Fingerprint: only tickets filed with it ("": any).
	Fingerprint string
	Limit       int // 1 to MaxSearchLimit
	Offset      int // results to skip: 0 to MaxSearchDepth-1
}

// SearchScope is the tickets a caller may find: all of them, or those
// filed under its subject or to one of Targets.
type SearchScope struct {
	All     bool
	Subject string
	Targets []string
}

// Hit is a ticket a search found.
type Hit struct {
	Report  Report // where it stands, as find_request reports it; RequestID as its caller gave it
	Title   string
	Snippet string // the best matching fragment of its text, the matches in [brackets]
	Subject string // the subject it was filed under ("" for the caller without a token)
}

// SearchPage is one page of a search's results, best first; More reports
// whether another page follows.
type SearchPage struct {
	Hits []Hit
	More bool
}

// SearchError is a search refused for its arguments: Argument is at fault.
type SearchError struct {
	Argument, Reason string
}

func (e *SearchError) Error() string { return e.Argument + " " + e.Reason }

// SearchWords are the words of a search's text: the runs of letters and
// digits, as a full-text index splits a ticket's text. Every other
// character only separates words, so no text is ever query syntax.
func SearchWords(text string) ([]string, error) {
	if len(text) > MaxSearchQueryLen {
		return nil, &SearchError{"query", fmt.Sprintf("is %d bytes long; at most %d", len(text), MaxSearchQueryLen)}
	}
	words := TextWords(text)
	if len(words) == 0 {
		return nil, &SearchError{"query", "has no words: give at least one word of letters or digits"}
	}
	if len(words) > MaxSearchWords {
		return nil, &SearchError{"query", fmt.Sprintf("has %d words; at most %d", len(words), MaxSearchWords)}
	}
	return words, nil
}

// TextWords are the runs of letters and digits of text.
func TextWords(text string) []string {
	return strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsNumber(r) })
}

// Check refuses a search without words or a fingerprint, or whose page or
// status is out of range.
func (s Search) Check() error {
	if s.Text == "" && s.Fingerprint == "" {
		return &SearchError{"query", "is missing: give words to find, a fingerprint, or both"}
	}
	if _, err := SearchWords(s.Text); err != nil && s.Text != "" {
		return err
	}
	if s.Limit < 1 || s.Limit > MaxSearchLimit {
		return &SearchError{"limit", fmt.Sprintf("is %d; give 1 to %d", s.Limit, MaxSearchLimit)}
	}
	if s.Offset < 0 || s.Offset >= MaxSearchDepth {
		return &SearchError{"cursor", fmt.Sprintf("points past the %d results a search returns at most", MaxSearchDepth)}
	}
	if s.Status != SearchAnyStatus && !containsStatus(s.Status) {
		return &SearchError{"status", fmt.Sprintf("%q is not one of pending, delivered, failed, uncertain", s.Status)}
	}
	return nil
}

func containsStatus(st SearchStatus) bool {
	for _, s := range SearchStatuses {
		if s == st {
			return true
		}
	}
	return false
}
