package ticket

import (
	"strings"
	"testing"
)

// indexFold's scan for the first byte finds what a rune-by-rune scan
// finds, case folding included (the Kelvin sign folds to k, the long s
// to s), and Defuse breaks every marker it finds.
func TestIndexFoldFindsWhatARuneScanFinds(t *testing.T) {
	runeScan := func(s, sub string) int {
		for i := range s {
			if hasPrefixFold(s[i:], sub) {
				return i
			}
		}
		return -1
	}
	subs := []string{ReservedTitleMarker, ReservedLabelPrefix, "ticket", "key", "[", ""}
	texts := []string{
		"", "[", "[[ticketrelay:", "no marker here", "x [TicketRelay:abc] y",
		"[tic\u212Aetrelay:k]", "[ticketrelay:", "[ticketrela", "é[ticketrelay:",
		"a [ b [ticketrelay: c [TICKETRELAY: d", "ticket\u017F", "\u212Aey [x",
		"invalid \xff[ticketrelay: bytes", strings.Repeat("[", 300) + "ticketrelay:",
	}
	for _, sub := range subs {
		for _, s := range texts {
			if got, want := indexFold(s, sub), runeScan(s, sub); got != want {
				t.Errorf("indexFold(%q, %q) = %d, a rune scan finds %d", s, sub, got, want)
			}
		}
	}
	for s, want := range map[string]string{
		"plain": "plain",
		"[TicketRelay:x] and [tic\u212Aetrelay:y]": "[ TicketRelay:x] and [ tic\u212Aetrelay:y]",
		"[[ticketrelay:": "[[ ticketrelay:",
	} {
		if got := Defuse(s); got != want || containsFold(got, ReservedTitleMarker) {
			t.Errorf("Defuse(%q) = %q, want %q", s, got, want)
		}
	}
}
