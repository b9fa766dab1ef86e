package request

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"time"
	"unicode/utf8"

	"ticketrelay/ticket"
)

// DefaultGroupWindow is how long after its first report a fingerprint's
// ticket takes the repeats of it, where the target's configuration does
// not say (group_window): a day covers the runs of a nightly job and the
// checks of a monitor, and a problem still seen the next day gets a fresh
// ticket that says so.
const DefaultGroupWindow = 24 * time.Hour

// Grouping is how a store groups a fingerprinted create (decision 0195).
type Grouping struct {
	// Window: a fingerprint's ticket takes occurrences until Window after
	// its first report (or until it is closed through ticketrelay).
	Window time.Duration
	// Comments: the target takes comments, and an occurrence is one on
	// the ticket. Without, it is recorded and counted, and nothing is
	// written downstream.
	Comments bool
}

// GroupKey names the group of a fingerprint: scoped like a request id (by
// the subject: two callers' fingerprints never meet) and by the target
// (a ticket lives in one). Hashed, as the cluster record's keys must be:
// SHA-256, base64url.
func GroupKey(subject, target, fingerprint string) string {
	sum := sha256.Sum256([]byte(subject + "\x00" + target + "\x00" + fingerprint))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// Occurrence is the comment that records req, a fingerprinted create, as
// the n-th report on the ticket first filed as first (a scoped id): a
// comment request under req's own request id, on the create's path, so
// its replay and conflict are a create's. Its text quotes the report.
func Occurrence(req ticket.Request, first string, n int) ticket.Request {
	c := req
	c.Kind, c.On, c.Ref, c.Set = ticket.KindComment, first, "", nil
	c.Title, c.Priority, c.Labels = "", "", nil
	head := fmt.Sprintf("Reported again (occurrence %d, fingerprint %q): %s", n, req.Fingerprint, req.Title)
	body := head
	if req.Body != "" {
		body += "\n\n" + req.Body
	}
	body = ticket.Defuse(body)
	if len(body) > ticket.MaxBodyLen {
		cut := ticket.MaxBodyLen - len("…")
		for cut > 0 && !utf8.RuneStart(body[cut]) {
			cut--
		}
		body = body[:cut] + "…"
	}
	c.Body = body
	return c
}
