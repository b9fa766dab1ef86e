package downstream_test

import (
	"strings"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/ticket"
)

// Every key fits every API's limit, and distinct scoped ids give distinct
// keys: a subject's scoped id can be longer than a request_id may be.
func TestKeyFitsAndStaysDistinct(t *testing.T) {
	long := strings.Repeat("r", ticket.MaxRequestIDLen)
	subject := strings.Repeat("s", 64)
	cases := []struct{ ns, id, want string }{
		{"", "abc", "abc"},
		{"prod", "abc", "prod:abc"},
		{"", long, long},
	}
	for _, c := range cases {
		if got := downstream.Key(c.ns, c.id); got != c.want {
			t.Errorf("Key(%q, %q) = %q, want %q", c.ns, c.id, got, c.want)
		}
	}
	seen := map[string]string{}
	for _, ns := range []string{"", "prod"} {
		for _, id := range []string{long, ticket.ScopedID(subject, long), ticket.ScopedID("alice", long), ticket.ScopedID("bob", long)} {
			k := downstream.Key(ns, id)
			if len(k) > downstream.MaxKeyLen {
				t.Errorf("Key(%q, %d-byte id) is %d bytes, over %d", ns, len(id), len(k), downstream.MaxKeyLen)
			}
			if prev, dup := seen[k]; dup {
				t.Errorf("Key(%q, ...) gives %q for both %q and %q", ns, k, prev, id)
			}
			seen[k] = id
			if downstream.Key(ns, id) != k {
				t.Errorf("Key(%q, %q) is not stable", ns, id)
			}
		}
	}
}
