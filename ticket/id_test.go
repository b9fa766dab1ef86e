package ticket_test

import (
	"strings"
	"testing"

	"ticketrelay/ticket"
)

// IsID takes what IDFor gives and nothing else of the kind: a reference
// that is no ticket id is looked up as a request id instead.
func TestIsIDTakesIDForsForm(t *testing.T) {
	for _, scoped := range []string{"", "r-1", "alice:checkout-500", strings.Repeat("x", 255)} {
		if id := ticket.IDFor(scoped); !ticket.IsID(id) {
			t.Errorf("IsID(IDFor(%q) = %q) = false", scoped, id)
		}
	}
	id := ticket.IDFor("r-1")
	for _, s := range []string{"", "tkt_", id[:len(id)-1], id + "0", strings.ToUpper(id), "tkt-" + id[4:],
		id[:5] + "i" + id[6:], // not in the alphabet (i, l, o, u are left out)
		id[:len(id)-1] + "z",  // a last letter whose unused bit is set: no IDFor gives it
		"r-1"} {
		if ticket.IsID(s) {
			t.Errorf("IsID(%q) = true; want false", s)
		}
	}
}
