package mcptools

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/ticket"
)

// SearchTicketsTool is the name of the search tool.
const SearchTicketsTool = "search_tickets"

// Searcher finds the tickets this installation filed (the ledger).
type Searcher interface {
	SearchTickets(ctx context.Context, s request.Search) (request.SearchPage, error)
}

// defaultSearchLimit is a page's size when the call names none.
const defaultSearchLimit = 10

type searchArgs struct {
	Query  *string `json:"query"` // nil: absent, which a fingerprint allows
	Target string  `json:"target"`
	Status string  `json:"status"`
	// Fingerprint filters by the fingerprint tickets were filed with.
	Fingerprint string `json:"fingerprint"`
	Limit       *int   `json:"limit"`
	Cursor      string `json:"cursor"`
}

// SearchHit is one ticket of search_tickets' answer.
type SearchHit struct {
	TicketID    string         `json:"ticket_id"`
	RequestID   string         `json:"request_id"`
	Target      string         `json:"target"`
	Title       string         `json:"title"`
	Status      request.Status `json:"status"`
	CreatedAt   *time.Time     `json:"created_at,omitempty"`
	ExternalURL string         `json:"external_url,omitempty"`
	Snippet     string         `json:"snippet"`
	Mine        bool           `json:"mine"`
	Fingerprint string         `json:"fingerprint,omitempty"`
}

// SearchAnswer is search_tickets' answer.
type SearchAnswer struct {
	Results    []SearchHit `json:"results"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

func (s *Server) searchHandler(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	o := outcomeOf(ctx)
	var a searchArgs
	if err := decodeArgs(req.Params.Arguments, &a); err != nil {
		return searchInvalid(o, err), nil
	}
	if a.Query != nil && *a.Query == "" {
		return searchInvalid(o, &request.SearchError{Argument: "query", Reason: "is empty: give words to find, or leave query out to search by fingerprint alone"}), nil
	}
	var text string
	if a.Query != nil {
		text = *a.Query
	}
	q := request.Search{Text: text, Target: a.Target, Status: request.SearchStatus(a.Status), Limit: defaultSearchLimit,
		Fingerprint: a.Fingerprint,
		Scope:       s.searchScope(req)}
	if a.Limit != nil {
		q.Limit = *a.Limit
	}
	if a.Cursor != "" {
		off, err := readCursor(a.Cursor, q)
		if err != nil {
			return searchInvalid(o, err), nil
		}
		q.Offset = off
	}
	if err := q.Check(); err != nil {
		return searchInvalid(o, err), nil
	}
	page, err := s.search.SearchTickets(ctx, q)
	if err != nil {
		s.log.Error("search failed", "err", err)
		return toolError(fmt.Sprintf("could not search the tickets (%v); try again", err)), nil
	}
	subject := callerSubject(req)
	ans := SearchAnswer{Results: make([]SearchHit, len(page.Hits))}
	for i, h := range page.Hits {
		ans.Results[i] = SearchHit{TicketID: h.Report.TicketID, RequestID: h.Report.RequestID, Target: h.Report.Target,
			Title: h.Title, Status: h.Report.Status, CreatedAt: h.Report.AcceptedAt, ExternalURL: h.Report.ExternalURL,
			Snippet: h.Snippet, Mine: h.Subject == subject, Fingerprint: h.Report.Fingerprint}
	}
	if page.More {
		ans.NextCursor = cursorFor(q, q.Offset+len(page.Hits))
	}
	o.word = metrics.CallOK
	return jsonResult(ans)
}

// searchScope is which tickets the caller of req finds. With SearchOwn,
// its own. Otherwise, without grants, or for the caller without a token
// when no grant holds it, every caller may file anywhere, so it finds
// every ticket; a caller held to grants finds its own and those of the
// targets it may file to.
func (s *Server) searchScope(req *mcp.CallToolRequest) request.SearchScope {
	own := request.SearchScope{Subject: callerSubject(req)}
	c := callerOf(extraOf(req))
	switch {
	case s.searchOwn:
		return own
	case s.access == nil || (c.anonymous && !s.access.anonymous):
		return request.SearchScope{All: true}
	}
	for _, b := range s.bindings {
		if s.access.allows(c, b.Tool) {
			own.Targets = append(own.Targets, b.Target)
		}
	}
	return own
}

// A cursor is where the next page starts and a digest of the search it
// belongs to, so that a cursor passed with other arguments is refused
// rather than paging a different list.
func cursorFor(q request.Search, offset int) string {
	b := binary.BigEndian.AppendUint32(nil, uint32(offset))
	return base64.RawURLEncoding.EncodeToString(append(b, searchDigest(q)...))
}

func readCursor(c string, q request.Search) (int, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) != 4+8 {
		return 0, &request.SearchError{Argument: "cursor", Reason: "is not a cursor search_tickets gave: pass next_cursor as it came, or none for the first page"}
	}
	if string(b[4:]) != string(searchDigest(q)) {
		return 0, &request.SearchError{Argument: "cursor", Reason: "belongs to a search with other arguments: repeat query, target, status and limit as they were, or start without a cursor"}
	}
	return int(binary.BigEndian.Uint32(b[:4])), nil
}

func searchDigest(q request.Search) []byte {
	sum := sha256.Sum256(fmt.Appendf(nil, "%q %q %q %d %q", q.Text, q.Target, q.Status, q.Limit, q.Fingerprint))
	return sum[:8]
}

// searchInvalid answers a search_tickets call with malformed arguments.
func searchInvalid(o *outcome, err error) *mcp.CallToolResult {
	o.reject(err)
	var se *request.SearchError
	if errors.As(err, &se) {
		err = &ticket.InvalidError{Argument: se.Argument, Reason: se.Reason}
	}
	return toolError("the search was not run: " + err.Error())
}

// searchTool is search_tickets; own: a caller held to grants finds only
// its own tickets (Config.SearchOwn).
func searchTool(own bool) *mcp.Tool {
	whose := "Finds your own tickets and those filed to the targets you may file to. "
	if own {
		whose = "Finds the tickets you filed. "
	}
	return &mcp.Tool{
		Name: SearchTicketsTool,
		Description: "Search the tickets this installation filed, before filing one: if a ticket for the same problem exists, " +
			"use it instead of filing a near-duplicate. Matches tickets holding every word of query in their title, body or labels " +
			"(whole words, any case; punctuation only separates words), best match first: a title match counts most; " +
			"with fingerprint and no query, the tickets filed with that fingerprint, newest first. Give query, fingerprint or both. " +
			whose + "Each result gives the ticket's id, its request_id, " +
			"target, title, status, when it was accepted, its link once delivered and a short snippet with the matches in [brackets]. " +
			"Pass next_cursor as cursor, with the same other arguments, for the next page. It only reads.",
		Annotations: &mcp.ToolAnnotations{
			Title:          "Search the filed tickets",
			ReadOnlyHint:   true,
			IdempotentHint: true, // see findTool
			OpenWorldHint:  boolPtr(false),
		},
		InputSchema:  searchInputSchema,
		OutputSchema: searchOutputSchema,
	}
}

var searchInputSchema = map[string]any{
	"type":                 "object",
	"additionalProperties": false,
	"properties": map[string]any{
		"query": map[string]any{
			"type": "string", "minLength": 1, "maxLength": request.MaxSearchQueryLen,
			"description": fmt.Sprintf("Words to find, e.g. the title you would file: tickets with every word match. Required unless fingerprint is given. "+
				"At most %d words and %d bytes.", request.MaxSearchWords, request.MaxSearchQueryLen),
		},
		"target": schemaString("Optional: only tickets filed to this target."),
		"status": map[string]any{
			"type": "string", "enum": []request.SearchStatus{request.SearchPending, request.SearchDelivered, request.SearchFailed, request.SearchUncertain},
			"description": "Optional: only tickets that stand so: pending (queued, published or retrying), delivered, failed or uncertain.",
		},
		"limit": map[string]any{
			"type": "integer", "minimum": 1, "maximum": request.MaxSearchLimit, "default": defaultSearchLimit,
			"description": "Results per page.",
		},
		"cursor":      schemaString("Optional: next_cursor of the previous page, to get the next one."),
		"fingerprint": schemaString("Optional: only tickets filed with this fingerprint (create_ticket's fingerprint argument); alone, without query, every such ticket."),
	},
}

var searchOutputSchema = map[string]any{
	"type":     "object",
	"required": []string{"results"},
	"properties": map[string]any{
		"results": map[string]any{
			"type":        "array",
			"description": "The tickets found, best match first.",
			"items": map[string]any{
				"type":     "object",
				"required": []string{"ticket_id", "request_id", "target", "title", "status", "snippet", "mine"},
				"properties": map[string]any{
					"ticket_id":  ticketIDOut,
					"request_id": schemaString("The request_id the ticket was filed with (find_request takes it for your own tickets)."),
					"target":     targetOut,
					"title":      schemaString("The ticket's title."),
					"status": map[string]any{"type": "string", "enum": statuses,
						"description": "Where the ticket stands, as find_request reports it."},
					"created_at":   schemaTime("When the ticket was accepted."),
					"external_url": externalURLOut,
					"snippet":      schemaString("A short fragment of the ticket's text around the matches, each in [brackets]."),
					"mine":         map[string]any{"type": "boolean", "description": "true if you filed it (under your token's subject)."},
					"fingerprint":  fingerprintOut,
				},
			},
		},
		"next_cursor": schemaString("Present when more results follow: pass it as cursor for the next page."),
	},
}
