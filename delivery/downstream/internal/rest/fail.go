package rest

import (
	"cmp"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"ticketrelay/delivery/downstream"
)

// Fail translates a non-2xx answer. msg is the API's own error message
// (see Message for a default):
//   - 401, 403: Auth
//   - 408, 429: Transient, not acted (the API says it did not process it);
//     429 is Throttled
//   - 5xx: Transient, may have acted (unless it answers a GET or HEAD)
//   - other 4xx: Permanent
//
// RetryAfter comes from the Retry-After header (seconds or an HTTP date).
//
// msg is made safe to store and print (see Clean): it comes from the
// answer, and goes to last_error, the logs, find_request's answer and the
// operator's terminal. Cut to 1000 bytes.
func (c *Client) Fail(r *Response, msg string) *downstream.Error {
	msg = cut(Clean(msg, slices.Concat(c.secrets, r.secrets)...), maxFailMessage)
	e := &downstream.Error{StatusCode: r.Status, RetryAfter: RetryAfter(r.Header, c.Now()), Err: errors.New(msg)}
	switch {
	case r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden:
		e.Class = downstream.Auth
	case r.Status == http.StatusRequestTimeout || r.Status == http.StatusTooManyRequests:
		e.Class, e.Throttled = downstream.Transient, r.Status == http.StatusTooManyRequests
	case r.Status >= 500:
		e.Class, e.MayHaveActed = downstream.Transient, !safeMethod(r.Method)
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
		return time.Duration(min(n, int64(maxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter) // Sub saturates a date centuries ahead; the cap keeps it sane
		}
	}
	return 0
}

// maxRetryAfter caps the wait an API may ask for.
const maxRetryAfter = 24 * time.Hour

// maxMessage and maxFailMessage bound what Message and Fail keep, in bytes.
const (
	maxMessage     = 500
	maxFailMessage = 1000
)

// Message is a readable error message from an answer: the body as text,
// made safe (see Clean: no credential of the request, no control
// character), trimmed and cut to 500 bytes, or the status text if the body
// is empty.
func Message(r *Response) string {
	s := strings.TrimSpace(Clean(string(r.Body), r.secrets...))
	if s == "" {
		return http.StatusText(r.Status)
	}
	return cut(s, maxMessage)
}

// Clean makes text from an answer safe to store and print: every
// occurrence of a secret becomes downstream.Redacted, every control
// character (C0, DEL and C1, newlines and tabs included: ESC would reach an
// operator's terminal) a space, and bytes that are not UTF-8 U+FFFD.
func Clean(s string, secrets ...downstream.Secret) string {
	vals := make([]string, 0, len(secrets))
	for _, sec := range secrets {
		if v := sec.Reveal(); v != "" {
			vals = append(vals, v)
		}
	}
	// Longest first, so that a secret that holds another is replaced whole.
	slices.SortStableFunc(vals, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, v := range vals {
		s = strings.ReplaceAll(s, v, downstream.Redacted)
	}
	return downstream.Printable(s)
}

// cut cuts s to at most n bytes at a character boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
