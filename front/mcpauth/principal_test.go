package mcpauth_test

import (
	"strings"
	"testing"

	"ticketrelay/front/mcpauth"
	"ticketrelay/ticket"
)

// TestPrincipalID: the request subject of a signed-in user is its issuer
// and sub, one-to-one, never holding the scoped id's separator, never
// spelling a static token's subject (which has no "/").
func TestPrincipalID(t *testing.T) {
	for _, tc := range []struct{ iss, sub, want string }{
		{"https://accounts.google.com", "1234567890", "accounts.google.com/1234567890"},
		{"https://login.microsoftonline.com/tid/v2.0", "AAAA-bb_c", "login.microsoftonline.com/tid/v2.0/AAAA-bb_c"},
		{"https://tenant.auth0.com/", "auth0|42", "tenant.auth0.com//auth0%7C42"},
		{"http://127.0.0.1:4444/", "a/b:c", "http%3A//127.0.0.1%3A4444//a%2Fb%3Ac"},
	} {
		got := mcpauth.Principal{Issuer: tc.iss, Subject: tc.sub}.ID()
		if got != tc.want {
			t.Errorf("%s + %s: %q, want %q", tc.iss, tc.sub, got, tc.want)
		}
		if strings.Contains(got, ticket.SubjectSeparator) {
			t.Errorf("%q holds %q", got, ticket.SubjectSeparator)
		}
	}
	// Pairs that a naive join would confuse stay apart.
	seen := map[string]string{}
	for _, p := range []mcpauth.Principal{
		{Issuer: "https://a.example/x", Subject: "y"}, {Issuer: "https://a.example", Subject: "x/y"},
		{Issuer: "https://a.example", Subject: "x%2Fy"}, {Issuer: "http://a.example", Subject: "y"},
		{Issuer: "https://http%3A//a.example", Subject: "y"}, {Issuer: "https://a.example/x", Subject: "Y"},
	} {
		id := p.ID()
		if prev, ok := seen[id]; ok {
			t.Errorf("%+v and %s share the id %q", p, prev, id)
		}
		seen[id] = p.Issuer + " " + p.Subject
	}
}
