package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func serve(t *testing.T, s *receiver) (hook, stats string) {
	t.Helper()
	h := httptest.NewUnstartedServer(http.HandlerFunc(s.hook))
	h.Config.ConnState = s.connState
	h.Start()
	t.Cleanup(h.Close)
	st := httptest.NewServer(http.HandlerFunc(s.serveStats))
	t.Cleanup(st.Close)
	return h.URL, st.URL
}

func post(t *testing.T, c *http.Client, url, key string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/hook", strings.NewReader(`{"type":"ticket.created"}`))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func getStats(t *testing.T, url string) Stats {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s Stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCounts: keys, duplicates, the time the expected key count was
// reached, POSTs without a key, and the connections the clients opened.
func TestCounts(t *testing.T) {
	s := &receiver{expect: 2, keys: map[string]struct{}{}}
	hook, stats := serve(t, s)
	reuse := &http.Client{Transport: &http.Transport{}}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	before := time.Now().UnixNano()
	if code := post(t, reuse, hook, "a"); code != http.StatusOK {
		t.Fatalf("first POST: %d", code)
	}
	if st := getStats(t, stats); st.Keys != 1 || st.ExpectedAt != 0 || st.FirstAt < before {
		t.Errorf("after one key: %+v", st)
	}
	post(t, reuse, hook, "b")
	post(t, reuse, hook, "a")
	if code := post(t, reuse, hook, ""); code != http.StatusBadRequest {
		t.Errorf("POST without a key: %d, want 400", code)
	}
	post(t, fresh, hook, "c")
	post(t, fresh, hook, "c")
	st := getStats(t, stats)
	want := Stats{Requests: 5, Keys: 3, Duplicates: 2, NoKey: 1, NewConns: 3}
	if st.Requests != want.Requests || st.Keys != want.Keys || st.Duplicates != want.Duplicates || st.NoKey != want.NoKey || st.NewConns != want.NewConns {
		t.Errorf("stats %+v, want %+v (one kept-alive connection, two closed after their POST)", st, want)
	}
	if st.ExpectedAt < st.FirstAt || st.ExpectedAt == 0 {
		t.Errorf("expected_at %d, first_at %d", st.ExpectedAt, st.FirstAt)
	}
	if st.MaxOpen < 1 || st.MaxOpen > 2 {
		t.Errorf("max open %d", st.MaxOpen)
	}
}

// TestLatency: an answer comes no sooner than -latency.
func TestLatency(t *testing.T) {
	const lat = 30 * time.Millisecond
	s := &receiver{latency: lat, expect: 1, keys: map[string]struct{}{}}
	hook, stats := serve(t, s)
	start := time.Now()
	post(t, http.DefaultClient, hook, "k")
	if took := time.Since(start); took < lat {
		t.Errorf("answered after %s, want at least %s", took, lat)
	}
	if st := getStats(t, stats); st.Keys != 1 || st.ExpectedAt == 0 {
		t.Errorf("stats %+v", st)
	}
}
