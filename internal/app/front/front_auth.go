package front

import (
	"fmt"
	"os"
	"ticketrelay/internal/app"

	"ticketrelay/mcphttp"
)

// frontAuth reads the bearer tokens from the file and the environment
// variable; nil means no authentication. Token values never reach a log or
// an error message.
func frontAuth(env app.Env, file, envVar, resource string, servers []string) (*mcphttp.AuthConfig, error) {
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
	if tokens.Len() == 0 {
		if resource != "" || len(servers) > 0 {
			return nil, fmt.Errorf("%w: -auth-resource and -auth-servers need bearer tokens (-auth-tokens-file or $%s)", app.ErrUsage, envVar)
		}
		return nil, nil
	}
	cfg := &mcphttp.AuthConfig{Tokens: tokens, Resource: resource, AuthorizationServers: servers}
	if resource != "" {
		if _, _, err := mcphttp.ResourceMetadataLocation(resource); err != nil {
			return nil, fmt.Errorf("%w: -auth-resource: %v", app.ErrUsage, err)
		}
		if len(servers) == 0 {
			return nil, fmt.Errorf("%w: -auth-resource needs -auth-servers", app.ErrUsage)
		}
	}
	return cfg, nil
}
