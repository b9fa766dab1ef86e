// Package ticket holds the domain value that flows through ticketrelay: a
// validated request to open a ticket, its canonical hash, and the ticket id
// derived from its request id.
package ticket

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on caller-supplied fields. The request id is passed downstream as a
// dedupe key, so it fits the smallest key limit we know of (Stripe, Zendesk
// and PagerDuty all accept 255 characters).
const (
	MaxRequestIDLen = 255
	MaxTitleLen     = 512       // characters
	MaxBodyLen      = 64 * 1024 // bytes
	MaxLabels       = 20
	MaxLabelLen     = 64
)

// Reserved marks. Adapters without a dedupe key find the item of an
// earlier attempt by a mark derived from the key: GitHub by a label
// ReservedLabelPrefix+hex, Redmine by a subject marker
// ReservedTitleMarker+hex+"]". A caller's label or title that carried one
// could pass its ticket off as another request's delivery, so Normalize
// refuses both (ignoring case, as the downstream filters do).
const (
	ReservedLabelPrefix = "ticketrelay-"
	ReservedTitleMarker = "[ticketrelay:"
)

// Priorities accepted by create_ticket; adapters map them to their own scale.
var Priorities = []string{"low", "normal", "high", "urgent"}

// DefaultPriority is used when the caller gives none.
const DefaultPriority = "normal"

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid argument")

// InvalidError names the argument that failed validation.
type InvalidError struct {
	Argument string
	Reason   string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("invalid argument %q: %s", e.Argument, e.Reason)
}

func (e *InvalidError) Unwrap() error { return ErrInvalid }

func invalid(arg, format string, a ...any) error {
	return &InvalidError{Argument: arg, Reason: fmt.Sprintf(format, a...)}
}

// Request is a validated request to open one ticket.
type Request struct {
	RequestID string `json:"request_id"`
	// Subject is who asked: the authenticated subject of the caller's bearer
	// token, or "" (the anonymous subject) without tokens. A request_id
	// belongs to its subject: two subjects that choose the same id make two
	// requests (see ScopedID). Not part of Hash: the key already holds it.
	Subject  string   `json:"subject,omitempty"`
	Tool     string   `json:"tool"`
	Target   string   `json:"target"`
	Title    string   `json:"title"`
	Body     string   `json:"body"`
	Priority string   `json:"priority"`
	Labels   []string `json:"labels,omitempty"`
	// Fingerprint groups repeated reports of one problem (fingerprint.go);
	// part of Hash, absent for a request without one, whose hash is
	// unchanged.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Caller is who asked, as the front knew them when it accepted the
	// request: recorded with the ticket, and what a target configured to
	// say so shows (downstream.Present). Not part of Hash: the same user's
	// retry from another client is the same request, and answers the
	// caller of its first call.
	Caller Caller `json:"caller,omitzero"`
	// Fields are the values the call gave the create tool's configured
	// fields (fields.go), by the target's field name: part of Hash, so a
	// retry that changes one is a conflict. Fixed are the tool's fixed
	// values as configured when the request was accepted: stored with it,
	// not part of Hash (the operator's edit of the file between a call and
	// its retry is no change of the caller's).
	Fields map[string]json.RawMessage `json:"fields,omitempty"`
	Fixed  map[string]json.RawMessage `json:"fixed,omitempty"`
	// Action makes the request a comment or an update (action.go); zero
	// for a create.
	Action
}

// Caller is who asked for a ticket: the subject of the caller's token and,
// where the token carried them, a display name and an email. The zero
// Caller is the anonymous local caller (no tokens, or stdio).
type Caller struct {
	Subject string `json:"subject"`
	Name    string `json:"name,omitempty"`
	Email   string `json:"email,omitempty"`
}

// IsZero reports the anonymous caller.
func (c Caller) IsZero() bool { return c == Caller{} }

// OrNil is c as an answer carries it: nil for the anonymous caller.
func (c Caller) OrNil() *Caller {
	if c.IsZero() {
		return nil
	}
	return &c
}

// Clean is c as a ticket may show it: control and invisible characters
// (Invisible) dropped, so that a name cannot break a footer's line or read
// otherwise than it is spelled, and each field cut to MaxCallerLen
// characters. The token's issuer vouches for the values, not for their
// shape.
func (c Caller) Clean() Caller {
	clean := func(s string) string {
		s = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) || Invisible(r) || r == utf8.RuneError {
				return -1
			}
			return r
		}, s)
		if utf8.RuneCountInString(s) > MaxCallerLen {
			s = string([]rune(s)[:MaxCallerLen])
		}
		return strings.TrimSpace(s)
	}
	return Caller{Subject: c.Subject, Name: clean(c.Name), Email: clean(c.Email)}
}

// MaxCallerLen bounds a caller's name and email, in characters.
const MaxCallerLen = 256

// Display is how a ticket names its caller to a reader: the email, else
// the display name, else the subject (a static token's caller has only
// that); "" for the anonymous caller.
func (c Caller) Display() string {
	switch {
	case c.Email != "":
		return c.Email
	case c.Name != "":
		return c.Name
	}
	return c.Subject
}

// ValidateRequestID checks a caller-supplied idempotency key: 1 to 255
// visible ASCII characters (no spaces, no control characters), because it
// travels downstream as a dedupe key and in NATS headers.
func ValidateRequestID(id string) error {
	if id == "" {
		return invalid("request_id", "is required (use a fresh UUID for each new ticket)")
	}
	if len(id) > MaxRequestIDLen {
		return invalid("request_id", "is %d bytes long; at most %d are allowed", len(id), MaxRequestIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return invalid("request_id", "contains byte 0x%02x at offset %d; only visible ASCII characters (no spaces) are allowed", c, i)
		}
	}
	return nil
}

// Normalize validates r in place and fills defaults. Labels are trimmed,
// de-duplicated and sorted, so that two calls that mean the same ticket hash
// the same.
func (r *Request) Normalize() error {
	if err := ValidateRequestID(r.RequestID); err != nil {
		return err
	}
	if err := checkText("title", r.Title, MaxTitleLen, false); err != nil {
		return err
	}
	if strings.TrimSpace(r.Title) == "" {
		return invalid("title", "is required")
	}
	if containsFold(r.Title, ReservedTitleMarker) {
		return invalid("title", "contains %q, which is reserved: ticketrelay marks its own issues with it to find them again; reword the title", ReservedTitleMarker)
	}
	if err := checkText("body", r.Body, 0, true); err != nil {
		return err
	}
	if len(r.Body) > MaxBodyLen {
		return invalid("body", "is %d bytes long; at most %d are allowed", len(r.Body), MaxBodyLen)
	}
	if r.Priority == "" {
		r.Priority = DefaultPriority
	}
	if !slices.Contains(Priorities, r.Priority) {
		return invalid("priority", "is %q; expected one of %s", r.Priority, strings.Join(Priorities, ", "))
	}
	if len(r.Labels) > MaxLabels {
		return invalid("labels", "has %d entries; at most %d are allowed", len(r.Labels), MaxLabels)
	}
	labels := make([]string, 0, len(r.Labels))
	for _, l := range r.Labels {
		l = strings.TrimSpace(l)
		if err := checkText("labels", l, MaxLabelLen, false); err != nil {
			return err
		}
		if l == "" {
			return invalid("labels", "contains an empty label")
		}
		if hasPrefixFold(l, ReservedLabelPrefix) {
			return invalid("labels", "label %q starts with %q, which is reserved: ticketrelay marks its own issues with such labels "+
				"to find them again; choose another label", l, ReservedLabelPrefix)
		}
		labels = append(labels, l)
	}
	slices.Sort(labels)
	r.Labels = slices.Compact(labels)
	if len(r.Labels) == 0 {
		r.Labels = nil
	}
	return nil
}

// hasPrefixFold reports whether s starts with prefix under Unicode case
// folding (strings.EqualFold: "TicketRelay-" and "ticketrelay-" match).
func hasPrefixFold(s, prefix string) bool {
	n, end := utf8.RuneCountInString(prefix), 0
	for ; n > 0 && end < len(s); n-- {
		_, w := utf8.DecodeRuneInString(s[end:])
		end += w
	}
	return n == 0 && strings.EqualFold(s[:end], prefix)
}

// containsFold reports whether sub occurs in s under Unicode case folding.
func containsFold(s, sub string) bool {
	return indexFold(s, sub) >= 0
}

// indexFold is the byte offset of the first match of sub in s under
// Unicode case folding, or -1. A sub that starts with an ASCII byte that
// is no letter (the reserved marker's '[') can only match where that byte
// is, since no other rune folds to it: the bodies it checks are scanned
// at memchr speed, not rune by rune.
func indexFold(s, sub string) int {
	if sub != "" && sub[0] < utf8.RuneSelf && !isASCIILetter(sub[0]) {
		for i := 0; i < len(s); {
			j := strings.IndexByte(s[i:], sub[0])
			if j < 0 {
				return -1
			}
			if hasPrefixFold(s[i+j:], sub) {
				return i + j
			}
			i += j + 1
		}
		return -1
	}
	for i := range s {
		if hasPrefixFold(s[i:], sub) {
			return i
		}
	}
	return -1
}

func isASCIILetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// checkText rejects invalid UTF-8, U+FFFD (what a JSON decoder leaves where
// the sender's bytes or escapes were not valid UTF-8) and control characters
// (newlines and tabs are allowed where multiline is true). One-line text (a
// title, a label: what lists show and people act on) must also hold no
// invisible format character that changes how it reads (Invisible), nor a
// tag character outside an emoji flag. A body may: it is free text pasted
// from anywhere (right-to-left prose carries its marks, logs their BOMs),
// read in full where it is shown.
func checkText(arg, s string, maxChars int, multiline bool) error {
	if !utf8.ValidString(s) {
		return invalid(arg, "is not valid UTF-8")
	}
	n := 0
	flag := false // inside an emoji tag sequence: U+1F3F4, tags, U+E007F
	for i, r := range s {
		n++
		switch {
		case r == utf8.RuneError:
			return invalid(arg, "contains U+FFFD at byte %d: the text was not valid UTF-8", i)
		case multiline && (r == '\n' || r == '\r' || r == '\t'):
		case unicode.IsControl(r):
			return invalid(arg, "contains control character U+%04X at byte %d", r, i)
		case multiline:
		case r == 0x1F3F4: // WAVING BLACK FLAG: a subdivision flag's tags may follow
			flag = true
		case isTag(r):
			if !flag {
				return invalid(arg, "contains tag character U+%04X at byte %d outside an emoji flag: tag characters are invisible and hide text; remove it", r, i)
			}
			flag = r != 0xE007F // CANCEL TAG ends the sequence
		case Invisible(r):
			return invalid(arg, "contains invisible format character U+%04X%s at byte %d: it changes how the text reads; remove it", r, formatName(r), i)
		default:
			flag = false
		}
	}
	if maxChars > 0 && n > maxChars {
		return invalid(arg, "is %d characters long; at most %d are allowed", n, maxChars)
	}
	return nil
}

// Hash is the canonical hash of everything the caller asked for except the
// request id: two calls with the same request id and the same hash are the
// same request. It is computed over the normalized struct, so key order and
// number spelling in the caller's JSON do not matter.
func (r *Request) Hash() string {
	c := *r
	c.RequestID, c.Subject, c.Caller, c.Fixed = "", "", Caller{}, nil
	b, err := json.Marshal(&c) // struct field order is fixed; cannot fail
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%x", sum[:])
}

// SubjectSeparator joins a subject and a request id in ScopedID. Subjects
// never contain it (mcphttp's token subjects are A-Z a-z 0-9 . _ @ -, and
// mcpauth.Principal.ID percent-encodes it).
const SubjectSeparator = ":"

// ScopedID is the name of a request across ticketrelay: the ledger's key,
// the Nats-Msg-Id, the base of the ticket id and of the downstream dedupe
// key. The anonymous subject's ids are the request ids themselves, so
// everything accepted before subjects existed keeps its name (and its
// ticket id and dedupe key); another subject's are "subject:request_id".
// An anonymous request_id may spell another subject's scoped id; the
// ledger keeps the subject of every row and refuses the second of the two
// (request.ErrOtherSubject), so no request ever answers for another's.
func ScopedID(subject, requestID string) string {
	if subject == "" {
		return requestID
	}
	return subject + SubjectSeparator + requestID
}

// Scoped is r's ScopedID.
func (r *Request) Scoped() string { return ScopedID(r.Subject, r.RequestID) }

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

const (
	idPrefix = "tkt_"
	idBytes  = 13 // of the SHA-256
)

// IDFor derives the ticket id from a request's scoped id (ScopedID), so
// that two instances that accept the same request answer with the same
// ticket id.
func IDFor(requestID string) string {
	sum := sha256.Sum256([]byte(requestID))
	return idPrefix + idEncoding.EncodeToString(sum[:idBytes])
}

// IsID reports whether s has the form of a ticket id (IDFor's output),
// which is also a valid part of a cluster record's key.
func IsID(s string) bool {
	enc, ok := strings.CutPrefix(s, idPrefix)
	if !ok || len(enc) != idEncoding.EncodedLen(idBytes) {
		return false
	}
	b, err := idEncoding.DecodeString(enc)
	return err == nil && idEncoding.EncodeToString(b) == enc
}

// Ticket is an accepted request: what the ledger row holds and the forwarder
// hands to a target.
type Ticket struct {
	Request
	ID        string    `json:"ticket_id"`
	CreatedAt time.Time `json:"created_at"`
}

// Ref is what the outbox carries to the forwarder: the ticket's name, not the
// ticket. Its ledger row holds the ticket, and the forwarder reads that row
// before every attempt anyway (ledger.PriorDelivery), so a message is ~70
// bytes instead of the whole ticket, and so is what nats-server stores,
// fsyncs and caches per message (it keeps each block it wrote in the last 10 s
// in memory). A message carrying a whole ticket, as published before, decodes
// as a Ref too.
type Ref struct {
	RequestID string `json:"request_id"`
	TicketID  string `json:"ticket_id"`
	// Kind is the request's kind (KindComment, KindUpdate); absent for a
	// create, as in every message published before kinds existed. It is
	// for whoever reads the stream: the forwarder acts on the ledger row's.
	Kind string `json:"kind,omitempty"`
}

// Invisible reports whether r is a format character (Unicode category Cf)
// that changes how text reads without being seen: the bidirectional
// embeddings, overrides, isolates and marks (U+202A–U+202E, U+2066–U+2069,
// U+200E, U+200F, U+061C), which reorder what follows (a title reads
// otherwise than it is spelled), zero-width spaces and joiners that hide
// word boundaries (U+200B, U+2060, U+FEFF), the soft hyphen, invisible
// operators, interlinear annotations that hide text, tag characters. Two
// kinds of Cf are not: the zero-width joiner and non-joiner (U+200D,
// U+200C), which join emoji into one ("👩‍💻") and which Persian and Indic
// scripts need, and reorder nothing; and the prepended concatenation marks
// (U+0600…), visible signs over the digits after them.
func Invisible(r rune) bool {
	if r == 0x200C || r == 0x200D || unicode.Is(unicode.Prepended_Concatenation_Mark, r) {
		return false
	}
	return unicode.Is(unicode.Cf, r)
}

// isTag reports whether r is a tag character (U+E0020–U+E007F): invisible
// ASCII look-alikes, visible only as part of an emoji flag (🏴 and tags).
func isTag(r rune) bool { return r >= 0xE0020 && r <= 0xE007F }

// formatName names the invisible characters most often met, for errors.
func formatName(r rune) string {
	names := map[rune]string{
		0x00AD: "SOFT HYPHEN", 0x061C: "ARABIC LETTER MARK", 0x200B: "ZERO WIDTH SPACE",
		0x200E: "LEFT-TO-RIGHT MARK", 0x200F: "RIGHT-TO-LEFT MARK",
		0x202A: "LEFT-TO-RIGHT EMBEDDING", 0x202B: "RIGHT-TO-LEFT EMBEDDING", 0x202C: "POP DIRECTIONAL FORMATTING",
		0x202D: "LEFT-TO-RIGHT OVERRIDE", 0x202E: "RIGHT-TO-LEFT OVERRIDE",
		0x2060: "WORD JOINER", 0x2066: "LEFT-TO-RIGHT ISOLATE", 0x2067: "RIGHT-TO-LEFT ISOLATE",
		0x2068: "FIRST STRONG ISOLATE", 0x2069: "POP DIRECTIONAL ISOLATE", 0xFEFF: "ZERO WIDTH NO-BREAK SPACE",
	}
	if n, ok := names[r]; ok {
		return " (" + n + ")"
	}
	return ""
}
