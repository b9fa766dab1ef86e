package downstream

import (
	"fmt"
	"strings"

	"ticketrelay/ticket"
)

// CallerMode is how a target's tickets say who asked for them (a
// target's caller option).
type CallerMode string

const (
	// CallerNone: the ticket says nothing of its caller (the default).
	CallerNone CallerMode = "none"
	// CallerFooter: a line at the end of the body names the caller.
	CallerFooter CallerMode = "footer"
	// CallerField: the API's own field for who asked holds the caller
	// (Zendesk's requester); only for adapters that have one.
	CallerField CallerMode = "field"
)

// CallerModes lists the modes, for the configuration's errors.
var CallerModes = []CallerMode{CallerNone, CallerFooter, CallerField}

// ParseCallerMode reads a caller option; "" is CallerNone.
func ParseCallerMode(s string) (CallerMode, error) {
	switch m := CallerMode(s); m {
	case "":
		return CallerNone, nil
	case CallerNone, CallerFooter, CallerField:
		return m, nil
	}
	return "", fmt.Errorf("caller %q: want none, footer or field", s)
}

// FooterSeparator opens the footer line of a ticket's body.
const FooterSeparator = "\n\n---\n"

// Footer is the line CallerFooter adds to a body for caller c; "" for the
// anonymous caller, whom no footer names.
func Footer(c ticket.Caller) string {
	who := c.Display()
	if who == "" {
		return ""
	}
	return "Filed by an agent for " + who + " via ticketrelay"
}

// Present is the ticket t as a target whose caller option is mode
// receives it: with CallerFooter the footer is appended to the body, with
// CallerField the caller is left for the adapter's field (a field that
// names a person by email: a caller without one gets the footer instead),
// and otherwise the caller is removed. It depends on nothing but t, which holds the
// caller recorded when the request was accepted, so every attempt (a
// redelivery, another host's) sends the same bytes.
func Present(mode CallerMode, t ticket.Ticket) ticket.Ticket {
	c := t.Caller
	t.Caller = ticket.Caller{}
	if mode == CallerField && c.Email == "" {
		mode = CallerFooter
	}
	switch mode {
	case CallerFooter:
		if f := Footer(c); f != "" {
			if strings.TrimSpace(t.Body) == "" {
				t.Body = f
			} else {
				t.Body += FooterSeparator + f
			}
		}
	case CallerField:
		t.Caller = c
	}
	return t
}
