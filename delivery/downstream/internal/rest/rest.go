// Package rest is the HTTP plumbing the downstream adapters share: one call,
// its answer read in full, and the translation of a failed call into a
// downstream.Error (class, may-have-acted, Retry-After).
package rest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"ticketrelay/delivery/downstream"
)

// DefaultTimeout bounds one HTTP call when the caller gives no client.
const DefaultTimeout = 20 * time.Second

// maxBody is the most of an answer that is read.
const maxBody = 1 << 20

// UserAgent is sent with every request (GitHub rejects requests without one).
const UserAgent = "ticketrelay"

// Client sends requests for one adapter.
//
// It never follows a redirect of a request other than GET or HEAD: Go's
// client would turn a POST answered 301, 302 or 303 into a GET of the new
// location, and the adapter would read whatever that GET answers as the
// answer to its create. Do turns such an answer into a Permanent error
// instead (see Do).
type Client struct {
	Now func() time.Time // used for Retry-After dates
	// HideURL keeps the request URL out of errors (it is a credential, as
	// a Slack hook URL is): errors go to logs and the ledger. Without it,
	// errors still never show a URL's userinfo, query or fragment (see
	// SafeURL).
	HideURL bool

	secrets []downstream.Secret // what no error shows (see Redact); kept as Secrets, so that printing a target shows none

	// send is the adapter's client as Do calls it: a shallow copy (sharing
	// its Transport and Jar) whose redirect policy is followOnlySafe and
	// whose timeout is timeout, which Do makes each request's deadline.
	send    *http.Client
	timeout time.Duration
}

// NewClient is a Client sending with hc (nil: a client with
// DefaultTimeout) and dating with now (nil: time.Now).
func NewClient(hc *http.Client, now func() time.Time) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
	}
	if now == nil {
		now = time.Now
	}
	send := *hc
	send.CheckRedirect = followOnlySafe(hc.CheckRedirect)
	send.Timeout = 0
	return &Client{Now: now, send: &send, timeout: hc.Timeout}
}

// Redact registers the credentials the adapter sends (in a header, a body
// or a URL), so that no message built from an answer shows them: a
// receiver or proxy that echoes the request ("request headers were:
// Authorization: Bearer …") would otherwise put them in last_error, the
// logs, find_request's answer and `dispatcher status`. Fail and Message
// show each as downstream.Redacted. The credentials of a request's
// Authorization and Proxy-Authorization headers are redacted without being
// registered (Basic's base64 is not the secret itself), nor are the
// password and query of its URL, and with HideURL its path. Call it while
// building the adapter; it returns c.
func (c *Client) Redact(secrets ...downstream.Secret) *Client {
	for _, s := range secrets {
		if !s.IsZero() {
			c.secrets = append(c.secrets, s)
		}
	}
	return c
}

// minQuerySecret is the shortest query value taken for a credential.
const minQuerySecret = 12

// secretsOf returns the client's secrets and the credentials req carries:
// in its authorization headers, and in its URL what SafeURL leaves out
// (the password, the query and, with HideURL, the path).
func (c *Client) secretsOf(req *http.Request) []downstream.Secret {
	s := slices.Clone(c.secrets)
	add := func(v string) {
		if v = strings.TrimSpace(v); v != "" {
			s = append(s, downstream.NewSecret(v))
		}
	}
	if pass, ok := req.URL.User.Password(); ok {
		add(pass)
	}
	add(req.URL.RawQuery)
	// A receiver may echo one value alone ("unknown token …"). Values too
	// short to be a credential are left (a lookup's status_id=*, per_page=10
	// would blank out every such character of the message).
	for _, vs := range req.URL.Query() {
		for _, v := range vs {
			if len(v) >= minQuerySecret {
				add(v)
			}
		}
	}
	if c.HideURL && req.URL.Path != "/" {
		add(req.URL.EscapedPath())
		add(req.URL.Path)
	}
	for _, h := range []string{"Authorization", "Proxy-Authorization"} {
		for _, v := range req.Header.Values(h) {
			add(v)
			scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " ")
			if !ok {
				continue
			}
			add(cred)
			if strings.EqualFold(scheme, "Basic") {
				if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
					add(string(dec))
					if _, pass, ok := strings.Cut(string(dec), ":"); ok {
						add(pass)
					}
				}
			}
		}
	}
	return s
}

// Response is an answer read in full.
type Response struct {
	Method string // of the request it answers: a GET or HEAD never acted
	Status int
	Header http.Header
	Body   []byte

	secrets []downstream.Secret // what no message shows (see Client.Redact)
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

// Result decodes a 2xx answer's body into v. A body that does not decode is
// a Transient error that may have acted, unless it answers a GET or HEAD:
// the API said yes, but what it made cannot be read.
func (r *Response) Result(v any) error {
	if err := r.JSON(v); err != nil {
		return &downstream.Error{Class: downstream.Transient, MayHaveActed: !safeMethod(r.Method), StatusCode: r.Status, Err: err}
	}
	return nil
}

// NewRequest is http.NewRequestWithContext whose error never shows the
// URL's userinfo, query or fragment (see SafeURL): a malformed URL is
// reported without the credentials it may hold.
func NewRequest(ctx context.Context, method, rawURL string, body io.Reader) (*http.Request, error) {
	return newRequest(ctx, method, rawURL, body, false)
}

// NewRequest is the package's NewRequest; with HideURL its error shows
// nothing of the URL but its scheme and host.
func (c *Client) NewRequest(ctx context.Context, method, rawURL string, body io.Reader) (*http.Request, error) {
	return newRequest(ctx, method, rawURL, body, c.HideURL)
}

func newRequest(ctx context.Context, method, rawURL string, body io.Reader, hide bool) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	if err != nil {
		return nil, &downstream.Error{Class: downstream.Permanent, Err: RedactURLError(err, hide)}
	}
	req.Header.Set("User-Agent", UserAgent)
	return req, nil
}

// NewJSONRequest builds a request with a JSON body (nil: no body). Its
// error never shows the URL's userinfo, query or fragment.
func NewJSONRequest(ctx context.Context, method, url string, body any) (*http.Request, error) {
	return newJSONRequest(ctx, method, url, body, false)
}

// NewJSONRequest is the package's NewJSONRequest; with HideURL its error
// shows nothing of the URL but its scheme and host.
func (c *Client) NewJSONRequest(ctx context.Context, method, url string, body any) (*http.Request, error) {
	return newJSONRequest(ctx, method, url, body, c.HideURL)
}

func newJSONRequest(ctx context.Context, method, url string, body any, hide bool) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf("encoding the request: %w", err)}
		}
		rd = bytes.NewReader(b)
	}
	req, err := newRequest(ctx, method, url, rd, hide)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// Do sends req and reads the answer. Any HTTP status is a Response but one:
// a 3xx answer to a request other than GET or HEAD, which is not followed
// and is a Permanent error (see redirected). A failure to get an answer is
// an error, already a *downstream.Error: Transient, with MayHaveActed set
// when the request had been written in full (the API may have processed it:
// a timeout or reset while waiting for the answer), and clear when it never
// left (connection refused, DNS) or was a GET or HEAD, which act on
// nothing. No error shows the URL's userinfo, query or fragment, nor, with
// HideURL, anything of it but its scheme and host.
func (c *Client) Do(req *http.Request) (*Response, error) {
	ctx := req.Context()
	if c.timeout > 0 {
		// The client's timeout becomes the request's deadline: it bounds
		// the call and the read of the answer as Client.Timeout does,
		// without the goroutine and timer net/http starts for every
		// request made under a Client.Timeout.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.timeout, errClientTimeout)
		defer cancel()
	}
	var w wroteTrace
	w.trace.WroteRequest = w.wroteRequest
	req = req.WithContext(httptrace.WithClientTrace(ctx, &w.trace))
	resp, err := c.send.Do(req)
	acting := !safeMethod(req.Method)
	if err != nil {
		return nil, &downstream.Error{Class: downstream.Transient, MayHaveActed: acting && w.wrote.Load(), Err: RedactURLError(err, c.HideURL)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		// The status line arrived: the API has seen the request.
		return nil, &downstream.Error{Class: downstream.Transient, MayHaveActed: acting, StatusCode: resp.StatusCode,
			Err: fmt.Errorf("reading the answer: %w", RedactURLError(err, c.HideURL))}
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		// Only a redirect followOnlySafe refused comes back as a 3xx.
		return nil, c.redirected(req, resp)
	}
	return &Response{Method: req.Method, Status: resp.StatusCode, Header: resp.Header, Body: body, secrets: c.secretsOf(req)}, nil
}

// wroteTrace notes whether the request was written in full: a failure
// after that may have acted.
type wroteTrace struct {
	wrote atomic.Bool
	trace httptrace.ClientTrace
}

func (w *wroteTrace) wroteRequest(i httptrace.WroteRequestInfo) {
	if i.Err == nil {
		w.wrote.Store(true)
	}
}

// errClientTimeout is the cause of a call that ran out of the client's
// timeout: net/http's errors name it.
var errClientTimeout = errors.New("the target's timeout ran out")

func safeMethod(m string) bool { return m == http.MethodGet || m == http.MethodHead }

// followOnlySafe is a CheckRedirect that follows redirects of GET and HEAD
// on the same host and scheme (through next, or Go's default of at most 10)
// and no other: the 3xx answer itself comes back (http.ErrUseLastResponse).
// Go drops only Authorization and Cookie on a redirect to another host; the
// adapters' own credential headers (X-Redmine-API-Key) would go along.
func followOnlySafe(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		first := via[0].URL
		if !safeMethod(via[0].Method) || req.URL.Host != first.Host || req.URL.Scheme != first.Scheme {
			return http.ErrUseLastResponse
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
}

// redirected is the error of a 3xx answer to a POST (or any method but GET
// and HEAD). 301, 302, 307 and 308 say the endpoint moved: the server did
// not act on the request, and the configured URL must be the final one.
// A 303 ("See Other") may point at the result of a request the server did
// process, so it may have acted.
func (c *Client) redirected(req *http.Request, resp *http.Response) *downstream.Error {
	to := "nowhere (no Location header)"
	if loc, err := resp.Location(); err == nil {
		to = SafeURL(loc, c.HideURL)
	}
	e := &downstream.Error{Class: downstream.Permanent, StatusCode: resp.StatusCode}
	why := fmt.Sprintf("it would turn the %s into a GET", req.Method)
	if safeMethod(req.Method) {
		why = "it leaves the configured host or scheme, and the credentials would go along"
	}
	what := fmt.Sprintf("%s %s was answered %s: the endpoint redirects to %s; configure the final URL instead "+
		"(a redirect is not followed: %s)", req.Method, SafeURL(req.URL, c.HideURL), Clean(resp.Status), to, why)
	switch {
	case safeMethod(req.Method):
		e.Err = errors.New(what)
	case resp.StatusCode == http.StatusSeeOther:
		e.MayHaveActed = true
		e.Err = errors.New(what + "; a 303 may point at the result of a request the server processed: check for the item before redriving")
	default:
		e.Err = errors.New(what + "; nothing was created")
	}
	return e
}
