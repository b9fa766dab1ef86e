package downstreamtest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"ticketrelay/testkit/testclock"
	"time"
)

// Clock is a settable clock shared by a fake and the adapter under test.
type Clock = testclock.Clock

// NewClock starts at t.
func NewClock(t time.Time) *Clock { return testclock.New(t) }

// StartServer starts an HTTP/1.1 server on 127.0.0.1 at a free port and
// closes it when the test ends.
func StartServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b)
}
