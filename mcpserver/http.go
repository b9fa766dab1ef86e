package mcpserver

import (
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPConfig configures the streamable HTTP endpoint.
type HTTPConfig struct {
	// AllowedOrigins are browser origins (scheme://host[:port]) allowed
	// besides loopback ones. Requests without an Origin header (CLI clients,
	// Claude Code) are always allowed.
	AllowedOrigins []string
	// Stateless serves without sessions.
	Stateless bool
	// SessionTimeout closes idle sessions. Default 30 minutes.
	SessionTimeout time.Duration
	Logger         *slog.Logger
}

// NewHTTPHandler serves srv over streamable HTTP behind an Origin check. The
// SDK's DNS-rebinding protection (Host header on loopback) stays on.
func NewHTTPHandler(srv *mcp.Server, cfg HTTPConfig) http.Handler {
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 30 * time.Minute
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless:      cfg.Stateless,
		SessionTimeout: cfg.SessionTimeout,
		Logger:         cfg.Logger,
	})
	return checkOrigin(cfg.AllowedOrigins, h)
}

// checkOrigin answers 403 to any request, whatever its method, whose Origin
// is neither loopback nor allowed: a web page must not drive the tools.
func checkOrigin(allowed []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && !originAllowed(origin, allowed) {
			http.Error(w, "Forbidden: Origin "+origin+" is not allowed", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func originAllowed(origin string, allowed []string) bool {
	if slices.Contains(allowed, origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
