package front

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"ticketrelay/front/mcpauth"
	"ticketrelay/front/mcphttp"
	"ticketrelay/internal/app"
	"ticketrelay/metrics"
)

// checkAuth reads the bearer tokens and refuses to serve beyond loopback
// without them (unless -insecure).
func (f *front) checkAuth() error {
	var m *metrics.OAuth
	if f.o.OAuthIssuer != "" {
		m = metrics.NewOAuth(f.reg, mcpauth.Outcomes)
	}
	auth, v, err := frontAuth(f.env, f.o, f.log, m)
	if err != nil {
		return err
	}
	loopback := app.IsLoopbackListen(f.o.Listen)
	switch {
	case auth != nil:
		f.log.Info("bearer-token authentication on", "subjects", auth.Tokens.Subjects(), "oauth_issuer", f.o.OAuthIssuer,
			"resource", auth.Resource, "scopes", auth.Scopes)
		auth.FailureLimit = mcphttp.RateLimit{PerSecond: -1}
		if f.o.AuthFailures > 0 {
			auth.FailureLimit = mcphttp.RateLimit{PerSecond: mcphttp.DefaultAuthFailureLimit.PerSecond, Burst: f.o.AuthFailures}
		}
	case !loopback && !f.o.Insecure:
		return fmt.Errorf("%w: refusing to serve %s beyond loopback without authentication: give -auth-tokens-file or $%s, or -oauth-issuer, or pass -insecure",
			app.ErrUsage, f.o.Listen, f.o.AuthTokensEnv)
	case !loopback:
		f.log.Warn("serving beyond loopback WITHOUT authentication (-insecure)", "listen", f.o.Listen)
	}
	if auth == nil && f.access != nil && !f.access.HoldsAnonymous() {
		f.log.Warn("the configuration's grants do not apply: without authentication every caller is anonymous, and no grant names anonymous callers")
	}
	f.auth, f.validator = auth, v
	return nil
}

// fetchKeys fetches the issuer's signing keys before serving, so that the
// first signed-in call does not wait for them. A failure is logged and
// counted (ticketrelay_oauth_jwks_keys stays 0, which alerts) and not
// fatal: static tokens keep working, and the keys are fetched again when
// an access token needs them.
func (f *front) fetchKeys(ctx context.Context) {
	if f.validator != nil {
		f.validator.Refresh(ctx)
	}
}

// serveHTTP serves MCP over streamable HTTP until ctx ends.
func (f *front) serveHTTP(ctx context.Context) error {
	for _, reason := range mcphttp.EvictedReasons {
		f.m.HTTPSessionsEvicted.WithLabelValues(reason) // exported at 0 from the start
	}
	hc := f.o.httpConfig()
	hc.Auth = f.auth
	if f.auth != nil && f.access != nil {
		f.auth.StepUp = func(ti *auth.TokenInfo, tool string) string {
			scope := f.access.StepUpScope(ti, tool)
			if scope != "" {
				f.m.ToolRefused.WithLabelValues(tool).Inc()
			}
			return scope
		}
	}
	hc.Refused = func(reason string) { f.m.HTTPRefused.WithLabelValues(reason).Inc() }
	hc.Evicted = func(reason string) { f.m.HTTPSessionsEvicted.WithLabelValues(reason).Inc() }
	hc.Logger = f.log
	f.auditRefusals(&hc)
	h := mcphttp.NewHandler(f.srv, hc)
	defer h.Close()
	metrics.SessionsFunc(f.reg, h.Sessions)
	mux := httpMux(h)
	if f.auth != nil && f.auth.Resource != "" {
		_, path, _ := mcphttp.ResourceMetadataLocation(f.auth.Resource)
		mux.Handle(path, mcphttp.ResourceMetadataHandler(f.auth))
		if path != "/.well-known/oauth-protected-resource" {
			mux.Handle("/.well-known/oauth-protected-resource", mcphttp.ResourceMetadataHandler(f.auth))
		}
	}
	hs, err := app.ServeLimits(ctx, f.o.Listen, mux, f.log, app.HTTPLimits{MaxConns: f.o.MaxConns})
	if err != nil {
		return app.ListenError("listen", f.o.Listen, err)
	}
	f.addrs["mcp"] = hs.Addr
	f.logConfig()
	f.log.Info("mcp-front serving MCP over streamable HTTP", "url", "http://"+hs.Addr+"/mcp", "metrics", f.addrs["metrics"], "db", f.o.DB)
	if err := app.Announce(f.env, f.o.AddrFile, f.addrs); err != nil {
		return err
	}
	<-ctx.Done()
	f.log.Info("mcp-front shutting down")
	return hs.Shutdown(5 * time.Second)
}
