package downstream_test

import (
	"strings"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/ticket"
)

// Present derives what a target receives from the ticket alone: the
// footer names the caller by email, else name, else subject; the
// anonymous caller gets none; the caller leaves the ticket unless the
// target takes it in a field, and a field that needs an email falls back
// to the footer.
func TestPresent(t *testing.T) {
	alice := ticket.Caller{Subject: "idp.example.com/u1", Name: "Alice Example", Email: "alice@example.com"}
	static := ticket.Caller{Subject: "ci-bot"}
	named := ticket.Caller{Subject: "idp.example.com/u2", Name: "Bob"}
	base := ticket.Ticket{Request: ticket.Request{Title: "Disk full", Body: "on db-1"}}
	with := func(c ticket.Caller) ticket.Ticket { tk := base; tk.Caller = c; return tk }

	for _, c := range []struct {
		name     string
		mode     downstream.CallerMode
		caller   ticket.Caller
		body     string
		keepsWho bool
	}{
		{"none", downstream.CallerNone, alice, "on db-1", false},
		{"unset is none", "", alice, "on db-1", false},
		{"footer by email", downstream.CallerFooter, alice, "on db-1\n\n---\nFiled by an agent for alice@example.com via ticketrelay", false},
		{"footer by name", downstream.CallerFooter, named, "on db-1\n\n---\nFiled by an agent for Bob via ticketrelay", false},
		{"footer by subject", downstream.CallerFooter, static, "on db-1\n\n---\nFiled by an agent for ci-bot via ticketrelay", false},
		{"anonymous: no footer", downstream.CallerFooter, ticket.Caller{}, "on db-1", false},
		{"field", downstream.CallerField, alice, "on db-1", true},
		{"field without email: footer", downstream.CallerField, static, "on db-1\n\n---\nFiled by an agent for ci-bot via ticketrelay", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := downstream.Present(c.mode, with(c.caller))
			if got.Body != c.body {
				t.Errorf("body = %q, want %q", got.Body, c.body)
			}
			if keeps := got.Caller == c.caller && !c.caller.IsZero(); keeps != c.keepsWho {
				t.Errorf("caller passed on = %+v, want passed on: %v", got.Caller, c.keepsWho)
			}
			if again := downstream.Present(c.mode, with(c.caller)); again.Body != got.Body || again.Caller != got.Caller {
				t.Errorf("a second presentation differs: %+v vs %+v", again, got)
			}
		})
	}
	empty := base
	empty.Body, empty.Caller = "", alice
	if got := downstream.Present(downstream.CallerFooter, empty).Body; strings.HasPrefix(got, "\n") || !strings.Contains(got, "alice@example.com") {
		t.Errorf("footer of an empty body = %q", got)
	}
}

func TestParseCallerMode(t *testing.T) {
	for in, want := range map[string]downstream.CallerMode{"": downstream.CallerNone, "none": downstream.CallerNone, "footer": downstream.CallerFooter, "field": downstream.CallerField} {
		if got, err := downstream.ParseCallerMode(in); err != nil || got != want {
			t.Errorf("ParseCallerMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := downstream.ParseCallerMode("Footer"); err == nil || !strings.Contains(err.Error(), "none, footer or field") {
		t.Errorf("ParseCallerMode(Footer) = %v; want an error listing the modes", err)
	}
}
