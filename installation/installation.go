// Package installation names what one ticketrelay installation keeps on a
// NATS server: its stream, subjects and (in multi-host mode) its request
// bucket. Any number of installations can share one NATS account or
// cluster: every shared resource carries the installation's name, so a
// forwarder never sees another installation's messages. The consumers
// belong to the stream, so they are apart with it.
package installation

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Name is an installation's name. The zero Name is the embedded server's
// (the names ticketrelay used before installations existed: TICKETS and
// tickets.<target>); it is refused on an external server, which other
// installations may share.
type Name string

// Embedded is the installation of a dispatcher's own embedded server.
const Embedded Name = ""

// MaxLen bounds a name: the stream, subject and bucket names built from it
// stay short, and JetStream keeps them in every message's metadata.
const MaxLen = 32

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// ErrInvalid is wrapped by Parse's errors.
var ErrInvalid = errors.New("invalid installation name")

// Parse checks s as an installation name: 1 to 32 lower-case letters,
// digits, '-' and '_', starting with a letter or digit (valid in stream,
// subject and bucket names alike, and one spelling per name).
func Parse(s string) (Name, error) {
	if s == "" {
		return Embedded, nil
	}
	if len(s) > MaxLen || !nameRE.MatchString(s) {
		return "", fmt.Errorf("%w %q: 1 to %d characters of a-z 0-9 - _, starting with a letter or digit", ErrInvalid, s, MaxLen)
	}
	return Name(s), nil
}

// Stream is the name of the installation's stream.
func (n Name) Stream() string {
	if n == Embedded {
		return "TICKETS"
	}
	return "ticketrelay-" + string(n)
}

// subjectPrefix is the prefix of every subject of the installation. Named
// installations use another first token than the embedded one's
// "tickets", so their streams never overlap a stream of a ticketrelay from
// before installations on the same server.
func (n Name) subjectPrefix() string {
	if n == Embedded {
		return "tickets."
	}
	return "ticketrelay." + string(n) + "."
}

// Subject is the subject the installation's tickets for target are
// published on.
func (n Name) Subject(target string) string { return n.subjectPrefix() + target }

// Subjects is the stream's subject filter: every subject of the
// installation, and nothing of another's.
func (n Name) Subjects() string { return n.subjectPrefix() + ">" }

// Target is the target a subject made by Subject names; ok is false for a
// subject of another installation.
func (n Name) Target(subject string) (target string, ok bool) {
	return strings.CutPrefix(subject, n.subjectPrefix())
}

// Bucket is the name of the installation's request bucket (multi-host
// mode): the cluster-wide record of every request.
func (n Name) Bucket() string {
	if n == Embedded {
		return "ticketrelay-requests"
	}
	return "ticketrelay-" + string(n) + "-requests"
}

// String is the name as an operator writes it; "(embedded)" for the
// embedded server's.
func (n Name) String() string {
	if n == Embedded {
		return "(embedded)"
	}
	return string(n)
}
