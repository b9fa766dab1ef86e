package mcphttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"ticketrelay/front/mcpauth"
	"ticketrelay/front/rpcguard"
	"ticketrelay/internal/loggate"
)

// Static tokens are mcpauth's: the dispatcher's console signs its
// operators in with the same files.
type Tokens = mcpauth.Tokens

// MinTokenLen is the shortest bearer token accepted in configuration.
const MinTokenLen = mcpauth.MinTokenLen

// ParseTokens reads tokens from text (mcpauth.ParseTokens).
func ParseTokens(source, text string) (*Tokens, error) { return mcpauth.ParseTokens(source, text) }

// AuthConfig turns on bearer-token authentication: static tokens, OAuth
// access tokens, or both.
type AuthConfig struct {
	Tokens *Tokens // static tokens; nil or empty: none
	// OAuth, if set, accepts the access tokens it validates (signed-in
	// users); a static token is looked up first.
	OAuth TokenValidator
	// Resource is the canonical URL of this MCP endpoint
	// (https://host/mcp). With AuthorizationServers it turns on the OAuth
	// protected-resource metadata (RFC 9728), advertised in WWW-Authenticate.
	Resource             string
	AuthorizationServers []string
	// Scopes are the scopes an OAuth access token must carry, every one
	// (403 insufficient_scope naming them otherwise); they are the
	// metadata's scopes_supported and the scope of the 401 challenge, so
	// that a client asks for them when it signs in. Static tokens carry
	// every scope.
	Scopes []string
	// StepUp, if set, is the OAuth scope a signed-in caller lacks for a
	// call of tool, which the configuration's grants give to that scope
	// ("" if it lacks none, or none it could obtain: mcptools.Access
	// StepUpScope). A tools/call it names a scope for is answered 403
	// insufficient_scope naming Scopes and that scope, so that the client
	// asks the user for it and calls again; nothing reaches the tools.
	StepUp func(ti *auth.TokenInfo, tool string) string
	// FailureLimit bounds, per client address (IPv4, or IPv6 /64), the
	// requests refused for want of a valid token: once its bucket is empty,
	// an address gets 429 before its token is even looked at, until the
	// bucket refills. Zero: DefaultAuthFailureLimit; PerSecond < 0: none.
	FailureLimit RateLimit
}

// DefaultAuthFailureLimit lets an address fail authentication 30 times in a
// row, then once a second.
var DefaultAuthFailureLimit = RateLimit{PerSecond: 1, Burst: 30}

// TokenValidator validates OAuth access tokens (mcpauth.Validator). Its
// errors wrap auth.ErrInvalidToken; an *mcpauth.Error says why.
type TokenValidator interface {
	Validate(ctx context.Context, token string) (mcpauth.Principal, error)
}

type tokenInfoKey struct{}

// requireToken answers 401 to a request without a valid bearer token: a
// static one, or an access token cfg.OAuth validates (403 if it lacks
// one of cfg.Scopes). A valid one reaches next with the SDK's TokenInfo in
// its context, whose UserID (the token's subject, or the signed-in user's
// mcpauth.Principal.ID) the SDK binds each session to: a request for a
// session opened by another subject gets 403. The token is never logged,
// nor kept past the request.
//
// Before any of that, an address that spent its cfg.FailureLimit gets 429
// (an unauthenticated flood is refused cheaply and cannot guess tokens at
// speed), and refusals are logged at most once a minute per address, with
// the count of those held back. Both refusals close the connection after
// the answer, so that a client refused cannot keep connections open.
func requireToken(cfg *AuthConfig, log *slog.Logger, now func() time.Time, refused func(string),
	audit func(*http.Request, string, string, string), next http.Handler) http.Handler {
	limit := cfg.FailureLimit
	if limit.PerSecond == 0 {
		limit = DefaultAuthFailureLimit
	}
	var fails *buckets
	if limit.PerSecond > 0 {
		fails = newBuckets(limit, now, maxTrackedClients)
	}
	logs := loggate.New(loggate.Every, maxTrackedClients, now)

	metadataURL, _, _ := ResourceMetadataLocation(cfg.Resource)
	if len(cfg.AuthorizationServers) == 0 {
		metadataURL = ""
	}
	// The SDK's middleware puts TokenInfo where its session binding looks
	// for it; the token itself was checked below.
	// The validator checked exp with its own leeway; the SDK's check must
	// not refuse what it accepted.
	inner := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		info, ok := ctx.Value(tokenInfoKey{}).(*auth.TokenInfo)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return info, nil
	}, &auth.RequireBearerTokenOptions{ResourceMetadataURL: metadataURL, AllowMissingExpiration: true, ClockSkew: mcpauth.MaxLeeway})(next)

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip := ipKey(r.RemoteAddr)
		if fails != nil {
			if wait := fails.empty(ip); wait > 0 {
				refused(RefusedAuthThrottled)
				secs := wholeSeconds(wait)
				if pass, held := logs.Pass(ip); pass {
					log.Warn("unauthenticated requests refused: too many from this address", "client", ip, "method", r.Method,
						"retry_after_s", secs, "refused_since_last_warning", held)
				}
				tooManyRequests(w, secs, fmt.Sprintf(
					"too many requests without a valid bearer token from this address; retry after %d s. Nothing was done.", secs))
				return
			}
		}
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		token = strings.TrimSpace(token)
		var reason string
		var info *auth.TokenInfo
		switch {
		case r.Header.Get("Authorization") == "":
			reason = "no bearer token"
		case !strings.EqualFold(scheme, "Bearer") || token == "":
			reason = "the Authorization header is not a bearer token"
		default:
			if subject, ok := cfg.Tokens.Verify(token); ok {
				info = &auth.TokenInfo{UserID: subject}
				break
			}
			if cfg.OAuth == nil {
				reason = "invalid bearer token"
				break
			}
			p, err := cfg.OAuth.Validate(r.Context(), token)
			if err != nil {
				reason = "invalid bearer token: " + err.Error()
				if e, ok := errors.AsType[*mcpauth.Error](err); ok {
					reason = "invalid access token: " + e.Reason
				}
				break
			}
			if !p.HasScopes(cfg.Scopes) {
				refused(RefusedInsufficientScope)
				audit(r, p.ID(), "", RefusedInsufficientScope)
				if pass, held := logs.Pass(ip); pass {
					log.Warn("request refused: the access token lacks a scope", "client", ip, "method", r.Method,
						"subject", p.ID(), "has", p.Scopes, "needs", cfg.Scopes, "refused_since_last_warning", held)
				}
				insufficientScope(w, cfg.Scopes, metadataURL)
				return
			}
			info = p.TokenInfo()
		}
		if info == nil {
			if fails != nil {
				fails.take(ip)
			}
			refused(RefusedUnauthenticated)
			if pass, held := logs.Pass(ip); pass {
				log.Warn("unauthenticated request refused", "client", ip, "method", r.Method, "reason", reason, "refused_since_last_warning", held)
			}
			unauthorized(w, reason, cfg.Scopes, metadataURL)
			return
		}
		inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenInfoKey{}, info)))
	})
}

// stepUp answers 403 insufficient_scope to a tools/call whose tool the
// configuration grants to an OAuth scope the signed-in caller lacks
// (cfg.StepUp): the MCP authorization specification's step-up, which a
// client answers by asking the user for the scope. It runs after checkBody,
// which read the message. The connection stays open: the client calls
// again on it once it holds the scope.
func stepUp(cfg *AuthConfig, log *slog.Logger, now func() time.Time, refused func(string),
	audit func(*http.Request, string, string, string), next http.Handler) http.Handler {
	if cfg == nil || cfg.StepUp == nil {
		return next
	}
	metadataURL := ""
	if len(cfg.AuthorizationServers) > 0 {
		metadataURL, _, _ = ResourceMetadataLocation(cfg.Resource)
	}
	logs := loggate.New(loggate.Every, maxTrackedClients, now)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msg, parsed := r.Context().Value(messageKey{}).(rpcguard.Message)
		ti := auth.TokenInfoFromContext(r.Context())
		if !parsed || msg.Method != "tools/call" || ti == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body) // checkBody's copy, in memory
		r.Body = io.NopCloser(bytes.NewReader(body))
		var call struct {
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if err != nil || json.Unmarshal(body, &call) != nil {
			next.ServeHTTP(w, r)
			return
		}
		scope := cfg.StepUp(ti, call.Params.Name)
		if scope == "" {
			next.ServeHTTP(w, r)
			return
		}
		refused(RefusedInsufficientScope)
		audit(r, ti.UserID, call.Params.Name, RefusedInsufficientScope)
		if pass, held := logs.Pass(ti.UserID); pass {
			log.Warn("tool call refused: the access token lacks the scope its grant needs", "subject", ti.UserID,
				"tool", call.Params.Name, "needs", scope, "refused_since_last_warning", held)
		}
		scopes := append(slices.Clone(cfg.Scopes), scope)
		challenge(w, http.StatusForbidden, "insufficient_scope", fmt.Sprintf(
			"%s needs the scope %s, which the access token lacks: sign in again asking for it. Nothing was done.",
			call.Params.Name, scope), scopes, metadataURL, false)
	})
}

// unauthorized answers 401 with the bearer challenge (RFC 6750) for why
// the token was refused, naming the scopes to ask for and pointing at the
// resource metadata if there is any (the MCP authorization specification),
// and closes the connection after the answer.
func unauthorized(w http.ResponseWriter, reason string, scopes []string, metadataURL string) {
	errCode := ""
	if reason != "no bearer token" {
		errCode = "invalid_token"
	}
	challenge(w, http.StatusUnauthorized, errCode, reason, scopes, metadataURL, true)
}

// insufficientScope answers 403 to a valid access token without every
// scope of scopes (RFC 6750 §3.1), naming them so that the client can ask
// the user for them (the MCP authorization specification's step-up).
func insufficientScope(w http.ResponseWriter, scopes []string, metadataURL string) {
	challenge(w, http.StatusForbidden, "insufficient_scope",
		"the access token lacks a scope this server needs: "+strings.Join(scopes, " "), scopes, metadataURL, true)
}

// challenge answers status with a bearer challenge; closing, it closes the
// connection after the answer (a refusal before any work).
func challenge(w http.ResponseWriter, status int, errCode, description string, scopes []string, metadataURL string, closing bool) {
	c := `Bearer realm="ticketrelay"`
	if errCode != "" {
		c += fmt.Sprintf(", error=%q", errCode)
	}
	if len(scopes) > 0 {
		c += fmt.Sprintf(", scope=%q", strings.Join(scopes, " "))
	}
	if metadataURL != "" {
		c += fmt.Sprintf(", resource_metadata=%q", metadataURL)
	}
	w.Header().Set("WWW-Authenticate", c)
	if closing {
		closeAfter(w)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if errCode == "" {
		errCode = "invalid_token"
	}
	json.NewEncoder(w).Encode(map[string]string{"error": errCode, "error_description": description})
}

// ResourceMetadataLocation returns where RFC 9728 puts the protected-resource
// metadata of resource: the URL and the path to serve it on
// (/.well-known/oauth-protected-resource followed by the resource's path).
func ResourceMetadataLocation(resource string) (metadataURL, path string, err error) {
	u, err := url.Parse(resource)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("resource %q: want an absolute http(s) URL without query or fragment", resource)
	}
	path = "/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.Path, "/")
	return u.Scheme + "://" + u.Host + path, path, nil
}

// ResourceMetadataHandler serves the OAuth protected-resource metadata of cfg
// (public, no authentication).
func ResourceMetadataHandler(cfg *AuthConfig) http.Handler {
	return auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               cfg.Resource,
		AuthorizationServers:   cfg.AuthorizationServers,
		ScopesSupported:        cfg.Scopes,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "ticketrelay",
	})
}
