package downstream_test

import (
	"testing"

	"ticketrelay/delivery/downstream"
)

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcode":                   "plain text, ünïcode",
		"a\x1b[31mred\nnext\tcol\x7f\u0085":     "a [31mred next col  ",
		"file \u202eexe.pdf":                    "file  exe.pdf",
		"a\u2066b\u2069c\u200ed\u061ce\ufeff":   "a b c d e ",
		"\U0001F469\u200d\U0001F4BB joined":     "\U0001F469\u200d\U0001F4BB joined",
		"bad \xff byte":                         "bad \ufffd byte",
		"hidden \U000E0041\U000E0042 tag chars": "hidden    tag chars",
	} {
		if got := downstream.Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
