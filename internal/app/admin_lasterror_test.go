package app_test

import (
	"strings"
	"testing"

	"ticketrelay/request"
)

// last_error holds what a downstream answered: `status` must not pass its
// control characters (an ESC sequence, a line break that forges a line) to
// the operator's terminal.
func TestAdminStatusStripsControlCharacters(t *testing.T) {
	a := newAdminDB(t)
	a.request(t, "req-esc", "alerts", string(request.StatusUncertain), 1,
		"transient error (HTTP 502): \x1b]0;pwned\x07\x1b[2Jgateway\u009b31m\x7f\r\n  req-forged  ticket tkt_x  target alerts  attempts 9", "")
	out, err := a.admin(t, "status")
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	for i, r := range out {
		if r != '\n' && (r < 0x20 || (r >= 0x7f && r <= 0x9f)) {
			t.Fatalf("status prints control character U+%04X at byte %d:\n%q", r, i, out)
		}
	}
	if strings.Contains(out, "\n  req-forged") {
		t.Errorf("a line break in last_error forged a line of its own:\n%s", out)
	}
	if !strings.Contains(out, "gateway") || !strings.Contains(out, "req-forged") {
		t.Errorf("status does not show the rest of last_error:\n%s", out)
	}
}
