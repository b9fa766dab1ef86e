package rest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"0", 0},
		{"-3", 0},
		{"soon", 0},
		{"Fri, 01 May 2026 12:00:30 GMT", 30 * time.Second},
		{"Fri, 01 May 2026 11:59:00 GMT", 0},              // in the past
		{"99999999", 24 * time.Hour},                      // capped
		{"Fri, 31 Dec 9999 23:59:59 GMT", 24 * time.Hour}, // capped too
	} {
		h := http.Header{}
		if c.v != "" {
			h.Set("Retry-After", c.v)
		}
		if got := RetryAfter(h, now); got != c.want {
			t.Errorf("RetryAfter(%q) = %v, want %v", c.v, got, c.want)
		}
	}
}

func TestFail(t *testing.T) {
	c := NewClient(nil, func() time.Time { return time.Unix(0, 0) })
	for _, x := range []struct {
		status int
		class  downstream.Class
		acted  bool
	}{
		{400, downstream.Permanent, false},
		{401, downstream.Auth, false},
		{403, downstream.Auth, false},
		{404, downstream.Permanent, false},
		{408, downstream.Transient, false},
		{422, downstream.Permanent, false},
		{429, downstream.Transient, false},
		{500, downstream.Transient, true},
		{502, downstream.Transient, true},
		{503, downstream.Transient, true},
	} {
		e := c.Fail(&Response{Status: x.status, Header: http.Header{"Retry-After": {"3"}}}, "the API's words")
		throttled := x.status == http.StatusTooManyRequests
		if e.Class != x.class || e.MayHaveActed != x.acted || e.Throttled != throttled || e.StatusCode != x.status || e.RetryAfter != 3*time.Second || e.Err.Error() != "the API's words" {
			t.Errorf("Fail(%d) = %+v; want %s, may have acted %v, throttled %v", x.status, e, x.class, x.acted, throttled)
		}
	}
}

func TestMessage(t *testing.T) {
	if got := Message(&Response{Status: 502}); got != "Bad Gateway" {
		t.Errorf("empty body: %q", got)
	}
	long := make([]byte, 2000)
	for i := range long {
		long[i] = 'x'
	}
	if got := Message(&Response{Status: 400, Body: long}); len(got) > 510 {
		t.Errorf("a long body gives a %d-byte message", len(got))
	}
}

// A moved endpoint answers a POST with a redirect. Go's client would follow
// 301, 302 and 303 with a GET of the new location and hand back what the GET
// answers, which the adapter would read as the answer to its create. Do
// follows no redirect of a POST: it is a permanent error naming the new
// location (without its query), and the new location sees no request.
func TestPostRedirectIsNotFollowed(t *testing.T) {
	var moved atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/old/{code}", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		code := map[string]int{"301": 301, "302": 302, "303": 303, "307": 307, "308": 308}[r.PathValue("code")]
		http.Redirect(w, r, "/new/items?sig=SIGVALUE", code)
	})
	mux.HandleFunc("/new/items", func(w http.ResponseWriter, r *http.Request) {
		moved.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":1}`)
	})
	srv := downstreamtest.StartServer(t, mux)
	ctx := context.Background()
	// A client of the adapter's own, with a policy that would follow all.
	followAll := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}
	for _, hc := range []*http.Client{nil, followAll} {
		c := NewClient(hc, nil)
		for _, code := range []string{"301", "302", "303", "307", "308"} {
			req, err := NewJSONRequest(ctx, http.MethodPost, srv.URL+"/old/"+code+"?token=TOKENVALUE", map[string]string{"a": "b"})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			var e *downstream.Error
			if !errors.As(err, &e) {
				t.Fatalf("POST answered %s: %+v, %v; want a *downstream.Error", code, resp, err)
			}
			msg := e.Error()
			if e.Class != downstream.Permanent || e.StatusCode != atoi(code) || e.MayHaveActed != (code == "303") ||
				!strings.Contains(msg, "redirects to "+srv.URL+"/new/items;") || !strings.Contains(msg, "configure the final URL") {
				t.Errorf("POST answered %s: %v (may have acted %v); want permanent, naming %s/new/items, may have acted only for 303",
					code, e, e.MayHaveActed, srv.URL)
			}
			if strings.Contains(msg, "SIGVALUE") || strings.Contains(msg, "TOKENVALUE") {
				t.Errorf("POST answered %s: the error shows a query: %s", code, msg)
			}
		}
	}
	if n := moved.Load(); n != 0 {
		t.Fatalf("the new location saw %d requests; a redirect of a POST must not be followed", n)
	}
	// A GET (a lookup) still follows redirects.
	c := NewClient(nil, nil)
	req, err := NewJSONRequest(ctx, http.MethodGet, srv.URL+"/old/302", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil || resp.Status != 200 || string(resp.Body) != `{"id":1}` || moved.Load() != 1 {
		t.Fatalf("GET through a 302: %+v, %v; want the new location's 200", resp, err)
	}
	// But not to another host: the adapters' credential headers would go
	// along (Go strips only Authorization and Cookie).
	var leaked atomic.Value
	other := downstreamtest.StartServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("X-Api-Key"))
	}))
	away := downstreamtest.StartServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)+"/stolen", http.StatusFound)
	}))
	req, err = NewJSONRequest(ctx, http.MethodGet, away.URL+"/lookup", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", "KEYVALUE")
	_, err = c.Do(req)
	var e *downstream.Error
	if !errors.As(err, &e) || e.Class != downstream.Permanent || !strings.Contains(e.Error(), "leaves the configured host") {
		t.Fatalf("GET redirected to another host: %v; want a permanent error saying it leaves the host", err)
	}
	if v, _ := leaked.Load().(string); v != "" {
		t.Fatalf("the other host received the credential header %q", v)
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// A hook URL is the credential: with HideURL the error of a redirect shows
// no path, neither the request's nor the new location's.
func TestPostRedirectHidesURL(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/services/HOOKSECRET", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/services/NEWSECRET", http.StatusMovedPermanently)
	})
	srv := downstreamtest.StartServer(t, mux)
	c := NewClient(nil, nil)
	c.HideURL = true
	req, err := c.NewJSONRequest(context.Background(), http.MethodPost, srv.URL+"/services/HOOKSECRET", map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(req)
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || e.StatusCode != 301 {
		t.Fatalf("redirected hook: %v; want permanent 301", err)
	}
	if msg := err.Error(); strings.Contains(msg, "SECRET") || !strings.Contains(msg, downstream.Redacted) {
		t.Fatalf("redirected hook: the error shows the URL: %s", msg)
	}
}

// No error of a failed call shows the URL's userinfo or query: a token in
// the query string (?token=…) or a password must not reach the ledger.
func TestErrorsHideCredentials(t *testing.T) {
	ctx := context.Background()
	for _, hide := range []bool{false, true} {
		c := NewClient(nil, nil)
		c.HideURL = hide
		for _, u := range []string{
			"http://127.0.0.1:1/hook?token=SECRETVALUE",
			"http://user:SECRETVALUE@127.0.0.1:1/hook?token=SECRETVALUE#SECRETVALUE",
		} {
			req, err := c.NewJSONRequest(ctx, http.MethodPost, u, map[string]string{"a": "b"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Do(req)
			if e := downstream.Classify(err); err == nil || e.Class != downstream.Transient || e.MayHaveActed {
				t.Fatalf("POST %s: %v; want transient, not acted", u, err)
			}
			msg := err.Error()
			if strings.Contains(msg, "SECRETVALUE") || strings.Contains(msg, "user") {
				t.Errorf("hide %v: the error shows a credential: %s", hide, msg)
			}
			if !strings.Contains(msg, "127.0.0.1:1") || strings.Contains(msg, "/hook") == hide {
				t.Errorf("hide %v: the error should name the host, and the path only when not hidden: %s", hide, msg)
			}
		}
		// A URL that does not parse: its parse error quotes it.
		for _, u := range []string{
			"http://127.0.0.1:1/ho%zzok?token=SECRETVALUE",
			"http://user:SECRETVALUE@127.0.0.1:1/ho%zzok?token=SECRETVALUE",
			"http://user:SECRETVALUE/hook", // no host: the password reads as a port
			"https://hooks.example/services/T/B/SECRETVALUE%zz",
		} {
			_, err := c.NewJSONRequest(ctx, http.MethodPost, u, nil)
			if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent {
				t.Fatalf("hide %v: NewJSONRequest(%q) = %v; want a permanent error", hide, u, err)
			}
			msg := err.Error()
			if strings.Contains(msg, "SECRETVALUE") || strings.Contains(msg, "%zz") || strings.Contains(msg, "/services") {
				t.Errorf("hide %v: a malformed URL's error shows it: %s", hide, msg)
			}
			if _, err := NewRequest(ctx, http.MethodPost, u, nil); err == nil || strings.Contains(err.Error(), "SECRETVALUE") {
				t.Errorf("NewRequest(%q): %v", u, err)
			}
		}
	}
	if _, err := BaseURL("jira", "j", "ftp://user:SECRETVALUE@jira.example/?token=SECRETVALUE", ""); err == nil ||
		strings.Contains(err.Error(), "SECRETVALUE") || !strings.Contains(err.Error(), "jira.example") {
		t.Errorf("BaseURL: %v; want an error naming the host and no credential", err)
	}
}

// TestReadsNeverActed: whatever goes wrong with a GET (a 5xx, a connection
// cut after the request was written, an answer that does not decode), it
// created nothing; the same failures of a POST may have.
func TestReadsNeverActed(t *testing.T) {
	var mode atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "5xx":
			http.Error(w, "boom", http.StatusBadGateway)
		case "cut":
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		default:
			w.Write([]byte("not json"))
		}
	}))
	t.Cleanup(srv.Close)
	c := NewClient(srv.Client(), nil)
	for _, m := range []string{"5xx", "cut", "undecodable"} {
		mode.Store(m)
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			req, err := c.NewJSONRequest(context.Background(), method, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err == nil && !resp.OK() {
				err = c.Fail(resp, Message(resp))
			} else if err == nil {
				var v map[string]any
				err = resp.Result(&v)
			}
			e := downstream.Classify(err)
			if err == nil || e.Class != downstream.Transient || e.MayHaveActed != (method == http.MethodPost) {
				t.Errorf("%s answered %s: %v (may have acted %v); want transient, may have acted only for the POST", method, m, err, e.MayHaveActed)
			}
		}
	}
}

// The client's timeout bounds a call whose answer never comes and one whose
// body stalls half-way, as Client.Timeout does, and the error says which
// limit ran out. A POST that was written may have acted.
func TestClientTimeoutBoundsTheCall(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stall-body" {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			w.Write([]byte(`{"id":`))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	hc := srv.Client()
	hc.Timeout = 200 * time.Millisecond
	c := NewClient(hc, nil)
	for _, path := range []string{"/no-answer", "/stall-body"} {
		req, err := c.NewJSONRequest(context.Background(), http.MethodPost, srv.URL+path, map[string]string{"a": "b"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.Do(req)
			done <- err
		}()
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the call outlived the client's 200ms timeout by 10s", path)
		}
		e := downstream.Classify(err)
		if err == nil || e.Class != downstream.Transient || !e.MayHaveActed || !strings.Contains(err.Error(), "timeout ran out") {
			t.Errorf("%s: %v (class %v, may have acted %v); want a transient error that may have acted and names the timeout", path, err, e.Class, e.MayHaveActed)
		}
	}
}
