// Package mcpauth validates OAuth 2.1 access tokens for mcp-front, the
// resource server of the MCP authorization specification: JWTs locally,
// against the issuer's JWKS (cached, refetched at a bounded rate), and
// opaque tokens by RFC 7662 introspection. A valid token yields the
// Principal that made the call. The token itself is never kept, logged or
// passed on.
package mcpauth

import (
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// Principal is who an access token speaks for.
type Principal struct {
	Issuer   string   // the token's iss
	Subject  string   // the token's sub: the user at Issuer
	Scopes   []string // scope (RFC 9068) or scp
	Groups   []string // the configured group claim
	Name     string
	Email    string
	ClientID string    // client_id, azp, appid or cid: the client the user signed in with
	Expiry   time.Time // zero if the token has none (introspection only)
}

// ID is the principal's request subject (decision 0092, 0131): a request
// id belongs to the person, whatever client or token they call with.
// It is the issuer (without "https://") and the sub, joined by "/", with
// every byte outside A-Z a-z 0-9 . _ - @ (and "/" within the issuer)
// percent-encoded, so that:
//   - it never holds ":" (ticket.SubjectSeparator);
//   - it is one-to-one: the sub holds no "/", so the last "/" splits it;
//   - it never equals a static token's subject, which holds no "/".
func (p Principal) ID() string {
	iss := p.Issuer
	if rest, ok := strings.CutPrefix(iss, "https://"); ok {
		iss = rest
	}
	return escape(iss, true) + "/" + escape(p.Subject, false)
}

// HasScopes reports whether p was granted every scope of want.
func (p Principal) HasScopes(want []string) bool {
	for _, s := range want {
		if !slices.Contains(p.Scopes, s) {
			return false
		}
	}
	return true
}

func escape(s string, keepSlash bool) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9',
			c == '.', c == '_', c == '-', c == '@', c == '/' && keepSlash:
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// TokenInfo is p as the go-sdk carries it through a request: UserID is
// p.ID(), and Extra holds p for the tools (FromTokenInfo).
func (p Principal) TokenInfo() *auth.TokenInfo {
	return &auth.TokenInfo{UserID: p.ID(), Scopes: p.Scopes, Expiration: p.Expiry,
		Extra: map[string]any{extraKey: p}}
}

// extraKey is where TokenInfo.Extra holds the principal.
const extraKey = "ticketrelay.principal"

// FromTokenInfo returns the principal of a request made with an OAuth
// access token; false for a static token or none.
func FromTokenInfo(ti *auth.TokenInfo) (Principal, bool) {
	if ti == nil {
		return Principal{}, false
	}
	p, ok := ti.Extra[extraKey].(Principal)
	return p, ok
}
