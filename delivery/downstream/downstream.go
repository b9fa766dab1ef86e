// Package downstream is the seam between the forwarder and an external API:
// one small interface, the capability flags that decide how a target may be
// retried, and the error classes an adapter translates its API's answers to.
// Each API lives in a sub-package that imports only this one.
package downstream

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"ticketrelay/ticket"
)

// LookupKind says whether a created item can be found again by its key.
type LookupKind int

const (
	LookupNone       LookupKind = iota // no way to find a created item again
	LookupEventual                     // a search that may lag: "not found" is no proof
	LookupConsistent                   // read-after-write: "not found" means never created
)

func (k LookupKind) String() string {
	switch k {
	case LookupEventual:
		return "eventual"
	case LookupConsistent:
		return "consistent"
	}
	return "none"
}

// Capabilities are what an adapter can guarantee.
type Capabilities struct {
	// DedupeKey: the API takes a caller-chosen key and never creates a second
	// item for a resend with the same key (within Window, if non-zero).
	DedupeKey bool
	// Window is how long the API remembers a dedupe key (0: for ever).
	Window time.Duration
	// Lookup says whether a created item can be found again by its key.
	Lookup LookupKind
}

// Idempotent reports whether a tool bound to a target with these
// capabilities may be retried blindly by the client (MCP idempotentHint).
func (c Capabilities) Idempotent() bool { return c.DedupeKey }

// Delivery is one attempt to create a ticket downstream.
type Delivery struct {
	Key     string // the dedupe key, derived from the request id; stable across attempts
	Attempt int    // 1 for the first attempt
	Ticket  ticket.Ticket
}

// Receipt is the downstream's confirmation.
type Receipt struct {
	ExternalID string
	URL        string
}

// Target is an external system tickets are delivered to.
type Target interface {
	// Name is the configured target name (a NATS subject token).
	Name() string
	Capabilities() Capabilities
	// Deliver creates the ticket. Errors should be *Error (see Classify).
	Deliver(ctx context.Context, d Delivery) (Receipt, error)
}

// Parallel is implemented by targets that say how many concurrent
// deliveries they take, such as the built-in local target, which has no
// rate limit and shares one fsync among concurrent deliveries: the
// forwarder uses that many workers and starts its limit on calls in flight
// there, not at forwarder.StartConcurrency. The dispatcher's -workers
// overrides the workers.
type Parallel interface {
	Workers() int
}

// RateLimit is the pace a target's API allows: on average at most
// PerSecond calls a second, at most Burst of them at once (a token bucket).
// The zero value is no limit. The forwarder waits for it before each call
// (a create or a lookup); a 429 and its Retry-After still mean what they
// say on top of it.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// IsZero reports no limit.
func (r RateLimit) IsZero() bool { return r == RateLimit{} }

// Validate checks a limit that is set: a positive, finite rate and a burst
// of at least one call.
func (r RateLimit) Validate() error {
	if r.IsZero() {
		return nil
	}
	if !(r.PerSecond > 0) || math.IsInf(r.PerSecond, 0) {
		return fmt.Errorf("rate %v per second: want a positive number", r.PerSecond)
	}
	if r.Burst < 1 {
		return fmt.Errorf("burst %d: want at least 1 call", r.Burst)
	}
	return nil
}

// Finder is implemented by targets with a lookup: it finds an item created
// by an earlier attempt with the same key.
type Finder interface {
	Find(ctx context.Context, d Delivery) (Receipt, bool, error)
}

// Class says what the forwarder may do after an error.
type Class int

const (
	// Transient: retry later (408, 429, 5xx, timeouts, connection errors).
	Transient Class = iota
	// Permanent: retrying cannot help (validation errors, other 4xx).
	Permanent
	// Auth: permanent, but counted apart so an expired token is visible.
	Auth
)

func (c Class) String() string {
	switch c {
	case Permanent:
		return "permanent"
	case Auth:
		return "auth"
	}
	return "transient"
}

// Error is an adapter's translation of a failed call.
type Error struct {
	Class Class
	// MayHaveActed is true when the request may have reached the API and
	// been processed (a timeout or reset after sending, a 5xx). For a target
	// without a dedupe key such an attempt must not be resent blindly.
	MayHaveActed bool
	// Throttled is true when the API refused the call for its rate limit
	// without processing it (a 429, GitHub's rate-limit 403): the request
	// is not at fault, so the call does not count toward the forwarder's
	// attempt limit.
	Throttled  bool
	StatusCode int           // HTTP status, if any
	RetryAfter time.Duration // the API's Retry-After, if any
	Err        error
}

func (e *Error) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("%s error (HTTP %d): %v", e.Class, e.StatusCode, e.Err)
	}
	return fmt.Sprintf("%s error: %v", e.Class, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Classify returns err as an *Error. Errors an adapter did not classify are
// transient and may have acted: the safe assumption.
func Classify(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Class: Transient, MayHaveActed: true, Err: err}
}

// MaxKeyLen is the longest dedupe key any supported API accepts.
const MaxKeyLen = 255

// Key derives the dedupe key sent downstream from a request's scoped id
// (ticket.ScopedID). With a namespace (one per deployment sharing a
// downstream account) the key is "namespace:id". A key that would exceed
// MaxKeyLen (a subject's scoped id can) is hashed: "namespace:sha256:hex",
// or "sha256:hex" without a namespace. The same inputs always give the same
// key, on every attempt and every instance.
func Key(namespace, requestID string) string {
	k := requestID
	if namespace != "" {
		k = namespace + ":" + requestID
	}
	if len(k) <= MaxKeyLen {
		return k
	}
	if namespace == "" {
		return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(requestID)))
	}
	return fmt.Sprintf("%s:sha256:%x", namespace, sha256.Sum256([]byte(requestID)))
}

// Printable replaces every control character of s (C0, DEL and C1,
// newlines and tabs included) and every invisible format character that
// changes how text reads (ticket.Invisible: a bidirectional override would
// reorder the rest of an operator's log line) with a space, and bytes that
// are not UTF-8 with U+FFFD: text an API answered, made safe to store, log
// and print (an ESC sequence would reach an operator's terminal).
func Printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xad && ticket.Invisible(r)) {
			return ' '
		}
		return r
	}, s)
}

// Shorten cuts s to at most n characters, the last of them "…", and reports
// whether it cut: what an adapter does with a title longer than its API's
// limit.
func Shorten(s string, n int) (string, bool) {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…", true
	}
	return s, false
}
