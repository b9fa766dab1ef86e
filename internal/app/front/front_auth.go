package front

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"ticketrelay/front/mcpauth"
	"ticketrelay/front/mcphttp"
	"ticketrelay/internal/app"
	"ticketrelay/metrics"
)

// frontAuth reads the bearer tokens from the file and the environment
// variable and builds the OAuth access-token validator of -oauth-issuer;
// nil means no authentication. Token values and the client secret never
// reach a log or an error message.
func frontAuth(env app.Env, o Options, log *slog.Logger, m *metrics.OAuth) (*mcphttp.AuthConfig, *mcpauth.Validator, error) {
	tokens, err := staticTokens(env, o.AuthTokensFile, o.AuthTokensEnv)
	if err != nil {
		return nil, nil, err
	}
	resource, servers := o.AuthResource, app.SplitList(o.AuthServers)
	if tokens.Len() == 0 && o.OAuthIssuer == "" {
		if resource != "" || len(servers) > 0 || o.OAuthScopes != "" {
			return nil, nil, fmt.Errorf("%w: -auth-resource, -auth-servers and -oauth-scopes need bearer tokens (-auth-tokens-file or $%s) or -oauth-issuer",
				app.ErrUsage, o.AuthTokensEnv)
		}
		return nil, nil, nil
	}
	cfg := &mcphttp.AuthConfig{Tokens: tokens, Resource: resource, AuthorizationServers: servers, Scopes: app.SplitList(o.OAuthScopes)}
	var v *mcpauth.Validator
	if o.OAuthIssuer != "" {
		if resource == "" {
			return nil, nil, fmt.Errorf("%w: -oauth-issuer needs -auth-resource: this endpoint's canonical URL, the audience of its access tokens", app.ErrUsage)
		}
		if v, err = validator(o, log, m); err != nil {
			return nil, nil, err
		}
		cfg.OAuth = v
		if len(servers) == 0 {
			cfg.AuthorizationServers = []string{o.OAuthIssuer}
		}
	}
	if resource != "" {
		if _, _, err := mcphttp.ResourceMetadataLocation(resource); err != nil {
			return nil, nil, fmt.Errorf("%w: -auth-resource: %v", app.ErrUsage, err)
		}
		if len(cfg.AuthorizationServers) == 0 {
			return nil, nil, fmt.Errorf("%w: -auth-resource needs -auth-servers (or -oauth-issuer)", app.ErrUsage)
		}
	}
	return cfg, v, nil
}

// staticTokens reads -auth-tokens-file and the variable envVar.
func staticTokens(env app.Env, file, envVar string) (*mcphttp.Tokens, error) {
	tokens := &mcphttp.Tokens{}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("-auth-tokens-file: %w", err)
		}
		t, err := mcphttp.ParseTokens(file, string(b))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", app.ErrUsage, err)
		}
		if err := tokens.Merge(t); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", app.ErrUsage, file, err)
		}
		if t.Len() == 0 {
			return nil, fmt.Errorf("%w: -auth-tokens-file %s holds no token", app.ErrUsage, file)
		}
	}
	if v, ok := env.Lookup(envVar); ok && envVar != "" {
		t, err := mcphttp.ParseTokens("$"+envVar, v)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", app.ErrUsage, err)
		}
		if err := tokens.Merge(t); err != nil {
			return nil, fmt.Errorf("%w: $%s: %v", app.ErrUsage, envVar, err)
		}
	}
	return tokens, nil
}

// validator builds the access-token validator of the -oauth-* flags.
func validator(o Options, log *slog.Logger, m *metrics.OAuth) (*mcpauth.Validator, error) {
	cfg := mcpauth.Config{
		Issuer: o.OAuthIssuer, Audience: cmp.Or(o.OAuthAudience, o.AuthResource), JWKSURL: o.OAuthJWKSURL,
		Algorithms: app.SplitList(o.OAuthAlgorithms), GroupsClaim: o.OAuthGroupsClaim, Leeway: o.OAuthLeeway,
		Logger: log, Metrics: m,
	}
	if o.OAuthLeeway == 0 {
		cfg.Leeway = -1 // the flag's 0 is no skew; mcpauth's is its default
	}
	switch {
	case o.OAuthClientID != "" && o.OAuthClientSecretFile != "":
		b, err := os.ReadFile(o.OAuthClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("-oauth-client-secret-file: %w", err)
		}
		secret := strings.TrimSpace(string(b))
		if secret == "" {
			return nil, fmt.Errorf("%w: -oauth-client-secret-file %s is empty", app.ErrUsage, o.OAuthClientSecretFile)
		}
		cfg.Introspection = &mcpauth.Introspection{URL: o.OAuthIntrospectionURL, ClientID: o.OAuthClientID, ClientSecret: secret}
	case o.OAuthClientID != "" || o.OAuthClientSecretFile != "" || o.OAuthIntrospectionURL != "":
		return nil, fmt.Errorf("%w: introspecting opaque access tokens needs both -oauth-client-id and -oauth-client-secret-file", app.ErrUsage)
	}
	v, err := mcpauth.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: -oauth-*: %v", app.ErrUsage, err)
	}
	return v, nil
}
