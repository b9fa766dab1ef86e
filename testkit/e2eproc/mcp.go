package e2eproc

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Dial opens a new MCP session over streamable HTTP with the endpoint url.
// The standalone SSE stream and the transport's reconnects are off: a test
// that kills the server wants the error, not a silent resend.
func Dial(ctx context.Context, url string) (*mcp.ClientSession, error) {
	return DialAs(ctx, url, "")
}

// DialAs is Dial with a bearer token on every request ("" sends none).
func DialAs(ctx context.Context, url, token string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "ticketrelay-e2e", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{
		Endpoint:             url,
		MaxRetries:           -1,
		DisableStandaloneSSE: true,
	}
	if token != "" {
		tr.HTTPClient = &http.Client{Transport: Bearer{Token: token, Next: http.DefaultTransport}}
	}
	return c.Connect(ctx, tr, nil)
}

// Bearer adds an Authorization header with Token to every request.
type Bearer struct {
	Token string
	Next  http.RoundTripper
}

func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	return b.Next.RoundTrip(r)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport underneath.
func (b Bearer) CloseIdleConnections() {
	if c, ok := b.Next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Connect dials url (see Dial) within 20 s or fails t; the session is
// closed at the end of the test.
func Connect(t testing.TB, url string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := Dial(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// CallTool calls tool with args and decodes its answer, the JSON object of
// a single text content, into out. A protocol error, a tool error or an
// answer of another shape fails t.
func CallTool(t testing.TB, cs *mcp.ClientSession, tool string, args map[string]any, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d content items", tool, len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("%s: content %T", tool, res.Content[0])
	}
	if res.IsError {
		t.Fatalf("%s: tool error: %s", tool, tc.Text)
	}
	if err := json.Unmarshal([]byte(tc.Text), out); err != nil {
		t.Fatalf("%s: answer %s: %v", tool, tc.Text, err)
	}
}
