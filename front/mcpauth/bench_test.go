package mcpauth_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/front/mcpauth"
	"ticketrelay/front/mcpauth/mcpauthtest"
	"ticketrelay/metrics"
)

// BenchmarkValidate is the cost of one call's token check: the first
// sight of a token verifies its signature; a client's later calls find
// it remembered.
func BenchmarkValidate(b *testing.B) {
	is := mcpauthtest.NewIssuer(b)
	v, err := mcpauth.New(mcpauth.Config{Issuer: is.URL(), Audience: resource,
		Metrics: metrics.NewOAuth(prometheus.NewRegistry(), mcpauth.Outcomes)})
	if err != nil {
		b.Fatal(err)
	}
	token := is.Mint(is.Claims("user-1", resource, time.Now()))
	if _, err := v.Validate(b.Context(), token); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Validate(b.Context(), token); err != nil {
			b.Fatal(err)
		}
	}
}
