package metrics

import "github.com/prometheus/client_golang/prometheus"

// OAuth holds the collectors of mcp-front's access-token validation
// (mcpauth). Every method is safe on a nil *OAuth.
type OAuth struct {
	Validations   *prometheus.CounterVec // outcome
	JWKSRefreshes *prometheus.CounterVec // result: ok, failed
	JWKSKeys      prometheus.Gauge
}

// Results of a JWKS refresh, the "result" label of JWKSRefreshes.
const (
	RefreshOK     = "ok"
	RefreshFailed = "failed"
)

// NewOAuth creates the token-validation collectors and registers them on
// reg, each outcome exported at 0 from the start so that a rule sees its
// first increase.
func NewOAuth(reg prometheus.Registerer, outcomes []string) *OAuth {
	o := &OAuth{
		Validations: newCounterVec("oauth_token_validations_total",
			"OAuth access tokens validated by mcp-front, by outcome (ok, or why the token was refused: expired, not_yet_valid, "+
				"bad_signature, wrong_issuer, wrong_audience, bad_algorithm, malformed, too_large, unknown_key, no_key, inactive, introspection_failed).", "outcome"),
		JWKSRefreshes: newCounterVec("oauth_jwks_refreshes_total",
			"Fetches of the issuer's signing keys (JWKS), by result (ok, failed).", "result"),
		JWKSKeys: newGauge("oauth_jwks_keys",
			"Signing keys of the issuer held by mcp-front. 0: no JWT access token can be validated (the JWKS was never fetched)."),
	}
	for _, out := range outcomes {
		o.Validations.WithLabelValues(out)
	}
	o.JWKSRefreshes.WithLabelValues(RefreshOK)
	o.JWKSRefreshes.WithLabelValues(RefreshFailed)
	reg.MustRegister(o.Validations, o.JWKSRefreshes, o.JWKSKeys)
	return o
}

// Validated counts one validation of outcome.
func (o *OAuth) Validated(outcome string) {
	if o != nil {
		o.Validations.WithLabelValues(outcome).Inc()
	}
}

// Refreshed counts one JWKS fetch and, when it succeeded, the keys it holds.
func (o *OAuth) Refreshed(ok bool, keys int) {
	if o == nil {
		return
	}
	if !ok {
		o.JWKSRefreshes.WithLabelValues(RefreshFailed).Inc()
		return
	}
	o.JWKSRefreshes.WithLabelValues(RefreshOK).Inc()
	o.JWKSKeys.Set(float64(keys))
}
