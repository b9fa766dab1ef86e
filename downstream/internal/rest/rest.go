// Package rest is the HTTP plumbing the downstream adapters share: one call,
// its answer read in full, and the translation of a failed call into a
// downstream.Error (class, may-have-acted, Retry-After).
package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"ticketrelay/downstream"
)

// DefaultTimeout bounds one HTTP call when the caller gives no client.
const DefaultTimeout = 20 * time.Second

// maxBody is the most of an answer that is read.
const maxBody = 1 << 20

// UserAgent is sent with every request (GitHub rejects requests without one).
const UserAgent = "ticketrelay"

// Client sends requests for one adapter.
type Client struct {
	HTTP *http.Client     // nil: a client with DefaultTimeout
	Now  func() time.Time // nil: time.Now; used for Retry-After dates
	// HideURL keeps the request URL out of errors (it is a credential, as
	// a Slack hook URL is): errors go to logs and the ledger.
	HideURL bool
}

// NewClient fills the defaults.
func NewClient(hc *http.Client, now func() time.Time) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
	}
	if now == nil {
		now = time.Now
	}
	return &Client{HTTP: hc, Now: now}
}

// Response is an answer read in full.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// OK reports a 2xx status.
func (r *Response) OK() bool { return r.Status >= 200 && r.Status < 300 }

// JSON decodes the body into v.
func (r *Response) JSON(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("decoding the answer (HTTP %d): %w", r.Status, err)
	}
	return nil
}

// NewJSONRequest builds a request with a JSON body (nil: no body).
func NewJSONRequest(ctx context.Context, method, url string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf("encoding the request: %w", err)}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, &downstream.Error{Class: downstream.Permanent, Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	return req, nil
}

// Do sends req and reads the answer. Any HTTP status is a Response; only a
// failure to get one is an error, already a *downstream.Error: Transient,
// with MayHaveActed set when the request had been written in full (the API
// may have processed it: a timeout or reset while waiting for the answer),
// and clear when it never left (connection refused, DNS).
func (c *Client) Do(req *http.Request) (*Response, error) {
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				wrote.Store(true)
			}
		},
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	resp, err := c.HTTP.Do(req)
	if err != nil {
		var ue *url.Error
		if c.HideURL && errors.As(err, &ue) {
			ue.URL = req.URL.Scheme + "://" + req.URL.Host + "/" + downstream.Redacted
		}
		return nil, &downstream.Error{Class: downstream.Transient, MayHaveActed: wrote.Load(), Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		// The status line arrived: the API has seen the request.
		return nil, &downstream.Error{Class: downstream.Transient, MayHaveActed: true, StatusCode: resp.StatusCode,
			Err: fmt.Errorf("reading the answer: %w", err)}
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// Fail translates a non-2xx answer. msg is the API's own error message
// (see Message for a default):
//   - 401, 403: Auth
//   - 408, 429: Transient, not acted (the API says it did not process it)
//   - 5xx: Transient, may have acted
//   - other 4xx: Permanent
//
// RetryAfter comes from the Retry-After header (seconds or an HTTP date).
func (c *Client) Fail(r *Response, msg string) *downstream.Error {
	e := &downstream.Error{StatusCode: r.Status, RetryAfter: RetryAfter(r.Header, c.Now()), Err: errors.New(msg)}
	switch {
	case r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden:
		e.Class = downstream.Auth
	case r.Status == http.StatusRequestTimeout || r.Status == http.StatusTooManyRequests:
		e.Class = downstream.Transient
	case r.Status >= 500:
		e.Class, e.MayHaveActed = downstream.Transient, true
	default:
		e.Class = downstream.Permanent
	}
	return e
}

// RetryAfter parses a Retry-After header: delay-seconds or an HTTP date.
// Absent, malformed or past: 0.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// Message is a readable error message from an answer: the body as text,
// trimmed and cut to 500 bytes, or the status text if the body is empty.
func Message(r *Response) string {
	s := strings.TrimSpace(string(r.Body))
	if s == "" {
		return http.StatusText(r.Status)
	}
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}

// BaseURL checks an adapter's configured endpoint and returns it without a
// trailing slash. kind and name make the error say which target is wrong;
// example (may be empty) shows what a good endpoint looks like.
func BaseURL(kind, name, endpoint, example string) (string, error) {
	base := strings.TrimRight(endpoint, "/")
	if strings.HasPrefix(base, "http://") || strings.HasPrefix(base, "https://") {
		return base, nil
	}
	if example != "" {
		example = " (e.g. " + example + ")"
	}
	return "", fmt.Errorf("%s %q: endpoint %q is not an http(s) URL%s", kind, name, endpoint, example)
}
