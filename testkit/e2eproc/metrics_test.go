package e2eproc

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A scrape of a real HTTP endpoint: histograms give their sums and counts,
// counters are summed over the series whose labels match, and a page that
// is not the Prometheus text format is an error.
func TestScrape(t *testing.T) {
	page := `# HELP ticketrelay_sqlite_commit_batch_size Operations committed together.
# TYPE ticketrelay_sqlite_commit_batch_size histogram
ticketrelay_sqlite_commit_batch_size_bucket{le="1"} 3
ticketrelay_sqlite_commit_batch_size_bucket{le="+Inf"} 7
ticketrelay_sqlite_commit_batch_size_sum 42
ticketrelay_sqlite_commit_batch_size_count 7
# TYPE ticketrelay_tool_calls_total counter
ticketrelay_tool_calls_total{outcome="created",tool="create_ticket"} 5
ticketrelay_tool_calls_total{outcome="replayed",tool="create_ticket"} 2
# TYPE ticketrelay_tool_calls_total_other counter
ticketrelay_tool_calls_total_other 100
`
	m, err := Scrape(serve(t, page))
	if err != nil {
		t.Fatal(err)
	}
	if sum, count := m.Histogram("ticketrelay_sqlite_commit_batch_size"); sum != 42 || count != 7 {
		t.Errorf("histogram sum %v count %v, want 42 and 7", sum, count)
	}
	if sum, count := m.Histogram("ticketrelay_tool_calls_total"); sum != 0 || count != 0 {
		t.Errorf("a counter read as a histogram: %v %v, want 0 0", sum, count)
	}
	if got := m.Get("ticketrelay_tool_calls_total"); got != 7 {
		t.Errorf("tool calls %v, want 7 (its own series only, not a longer name's)", got)
	}
	if got := m.Get("ticketrelay_tool_calls_total", "outcome", "replayed"); got != 2 {
		t.Errorf("replayed tool calls %v, want 2", got)
	}

	if _, err := Scrape(serve(t, "novalue\n")); err == nil {
		t.Error("a line without a value parsed")
	}
}

// serve answers GET /metrics with page and returns its address.
func serve(t *testing.T, page string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(page))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}
