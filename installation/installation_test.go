package installation_test

import (
	"errors"
	"strings"
	"testing"

	"ticketrelay/installation"
)

func TestParse(t *testing.T) {
	for _, ok := range []string{"", "acme", "acme-prod", "team_2", "0", strings.Repeat("a", installation.MaxLen)} {
		if n, err := installation.Parse(ok); err != nil || string(n) != ok {
			t.Errorf("Parse(%q) = %q, %v", ok, n, err)
		}
	}
	for _, bad := range []string{"Acme", "a.b", "a b", "a>", "a*", "-a", "_a", "a/b", "ä", strings.Repeat("a", installation.MaxLen+1)} {
		if _, err := installation.Parse(bad); !errors.Is(err, installation.ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// The embedded installation keeps the names of before; named ones never
// share a stream, a subject or a bucket, with each other or with it.
func TestNamesKeepInstallationsApart(t *testing.T) {
	e, a, b := installation.Embedded, installation.Name("a"), installation.Name("a-b")
	if e.Stream() != "TICKETS" || e.Subject("local") != "tickets.local" || e.Subjects() != "tickets.>" {
		t.Errorf("embedded names changed: %s %s %s", e.Stream(), e.Subject("local"), e.Subjects())
	}
	seen := map[string]installation.Name{}
	for _, n := range []installation.Name{e, a, b} {
		for _, name := range []string{n.Stream(), n.Bucket(), n.Subjects()} {
			if other, dup := seen[name]; dup {
				t.Errorf("%s and %s share %s", n, other, name)
			}
			seen[name] = n
		}
		if got, ok := n.Target(n.Subject("zendesk")); !ok || got != "zendesk" {
			t.Errorf("%s: Target(Subject(zendesk)) = %q, %v", n, got, ok)
		}
		for _, m := range []installation.Name{e, a, b} {
			if m == n {
				continue
			}
			if _, ok := n.Target(m.Subject("zendesk")); ok {
				t.Errorf("%s takes %s's subject %s for its own", n, m, m.Subject("zendesk"))
			}
		}
	}
}
