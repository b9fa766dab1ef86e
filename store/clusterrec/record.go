// Package clusterrec is the cluster-wide record of every request of a
// multi-host installation: one entry per request in a replicated JetStream
// key-value bucket, written with compare-and-set. It decides acceptance
// before any host commits (Claim), holds the ticket so that any host can
// deliver it, and holds the delivery outcome so that every host answers
// find_request alike and no host delivers a settled request again.
//
// Nothing here is home-made consensus: every decision is a JetStream
// compare-and-set on the bucket's stream, read back from the stream leader.
package clusterrec

import (
	"crypto/sha256"
	"encoding/base64"
	"time"

	"ticketrelay/request"
	"ticketrelay/ticket"
)

// Phase is where a record's acceptance stands.
type Phase string

const (
	// PhaseClaimed: a host wrote the record and is committing the request
	// to its own ledger. A claim no host accepted within the takeover time
	// may be taken over by a retry on any host.
	PhaseClaimed Phase = "claimed"
	// PhaseAccepted: the host committed the request; it was (or is being)
	// answered as accepted.
	PhaseAccepted Phase = "accepted"
)

// FormatVersion is the record format this build writes and reads.
const FormatVersion = 1

// Record is one request's entry, as JSON in the bucket.
type Record struct {
	Format    int       `json:"v"`
	Phase     Phase     `json:"phase"`
	Host      string    `json:"host"`  // the host that claimed (and, once accepted, holds) the request
	Nonce     string    `json:"nonce"` // the claim's, so that its writer knows it after a lost answer
	ClaimedAt time.Time `json:"claimed_at"`
	ArgsHash  string    `json:"args_hash"`
	// Ticket is the whole ticket: any host can deliver it, and commit it to
	// its own ledger when the host that claimed it is gone. Its RequestID
	// is the caller's, its Subject the caller's subject.
	Ticket   ticket.Ticket `json:"ticket"`
	Delivery *Delivery     `json:"delivery,omitempty"`
	// Trace is the claiming call's W3C traceparent ("": untraced): a host
	// that adopts the request links its own trace to it.
	Trace string `json:"trace,omitempty"`
	// Group is set on a fingerprinted create stored as an occurrence of
	// its fingerprint's open ticket (fingerprint.go).
	Group *Grouped `json:"group,omitempty"`
	// Grouping is set on the claim of a fingerprinted create until its
	// group is decided: how to decide it. A host that adopts the claim
	// decides it first, as a retry would (fingerprint.go).
	Grouping *request.Grouping `json:"grouping,omitempty"`
	// Waiters says that comments or updates were parked on this create
	// (waiting.go): the write that settles it publishes them again.
	Waiters bool `json:"waiters,omitempty"`
}

// Delivery is a request's delivery outcome as the forwarders record it.
type Delivery struct {
	Target        string    `json:"target"`
	State         string    `json:"state"` // as request.Delivery.State
	Attempts      int       `json:"attempts,omitempty"`
	Throttled     int       `json:"throttled,omitempty"`
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
	LastError     string    `json:"last_error,omitempty"`
	// Failure is a failed delivery's class (request.Failure). A record
	// written before classes were has none: its failure reads as one that
	// may have reached the downstream, whatever LastError says.
	Failure     request.Failure `json:"failure,omitempty"`
	ExternalID  string          `json:"external_id,omitempty"`
	ExternalURL string          `json:"external_url,omitempty"`
	UpdatedAt   time.Time       `json:"updated_at"`
	By          string          `json:"by,omitempty"` // the host whose forwarder wrote it
	// Version counts the writes, as request.Delivery.Version does: the
	// forwarder's conditional writes are on it.
	Version int64 `json:"version"`
	// Call is the downstream call this write ends, for every host's
	// console; nil: the write ends none, or an older build wrote it.
	Call *Call `json:"call,omitempty"`
}

// Scoped is the record's request under its scoped id (ticket.ScopedID).
func (r Record) Scoped() string { return r.Ticket.Scoped() }

// Key is the bucket key of a request's scoped id: KV keys take fewer
// characters than request ids may hold, so the id is hashed (SHA-256,
// base64url: 43 characters of A-Z a-z 0-9 - _), never narrowed.
func Key(scoped string) string { return recordPrefix + keyHash(scoped) }

// keyHash is the part of a key that names the scoped id.
func keyHash(scoped string) string {
	sum := sha256.Sum256([]byte(scoped))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// recordPrefix starts every request's key; hosts' keys start with
// hostPrefix, parked requests' with waitPrefix.
const (
	recordPrefix = "r."
	hostPrefix   = "h."
	waitPrefix   = "w."
)
