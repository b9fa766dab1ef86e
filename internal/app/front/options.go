package front

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"ticketrelay/front/mcpauth"
	"ticketrelay/front/mcphttp"
	"ticketrelay/front/mcptools"
	"ticketrelay/installation"
	"ticketrelay/internal/app"
	"ticketrelay/internal/flagenv"
)

// DefaultDB is the ledger -db names by default: the dispatcher's with its
// default -data.
const DefaultDB = "data/tickets.db"

// DefaultMaxConns bounds the connections mcp-front serves at once: no
// bound (0). A global bound is one any single client address can fill
// cheaply (one request, then 2 minutes idle per connection), leaving
// everyone else waiting to be accepted, and each session's GET stream
// holds a connection of its own. What bounds them is the process's file
// descriptor limit and httpIdleTimeout; -max-conns is there for an
// operator who wants a bound anyway (behind a proxy that spreads
// connections fairly, for instance).
const DefaultMaxConns = 0

// Options are mcp-front's settings, one field per flag. A flag's default
// is the field's; the fields whose default depends on another (metrics
// off with -stdio, the rate limit beyond loopback) are filled by
// WithDefaults. Validate checks them before anything is built. A count or
// duration of 0 means what its flag says (no bound, or the default);
// httpConfig is the one place that turns them into mcphttp's convention
// (0: default, negative: none).
type Options struct {
	DB                    string        // -db; default DefaultDB
	CreateDB              bool          // -create-db: a -db that does not exist is created
	Listen                string        // -listen; default 127.0.0.1:8080
	MetricsListen         string        // -metrics-listen; default 127.0.0.1:9464, off with -stdio unless given
	Stdio                 bool          // -stdio
	Config                string        // -config
	LogLevel              string        // -log-level; default info
	AllowedOrigins        string        // -allowed-origins, comma-separated
	Stateless             bool          // -stateless
	SessionTimeout        time.Duration // -session-timeout; default mcphttp.DefaultSessionTimeout
	EventStoreBytes       int           // -event-store-bytes; 0: no resumption
	KeepAlive             time.Duration // -keepalive; default 30s, 0: no pings
	KeepAliveFailures     int           // -keepalive-failures; default mcphttp.DefaultKeepAliveFailures
	MaxBodyBytes          int64         // -max-body-bytes; default mcphttp.DefaultMaxBodyBytes
	MaxSessions           int           // -max-sessions; 0: no bound
	MaxSessionsPerSubject int           // -max-sessions-per-subject; 0: no bound
	MaxSessionsPerAddress int           // -max-sessions-per-address; 0: no bound
	SessionUnusedTimeout  time.Duration // -session-unused-timeout; 0: none
	MaxConns              int           // -max-conns; default DefaultMaxConns, 0: no bound
	AuthTokensFile        string        // -auth-tokens-file
	AuthTokensEnv         string        // -auth-tokens-env; default TICKETRELAY_AUTH_TOKENS
	AuthResource          string        // -auth-resource
	AuthServers           string        // -auth-servers, comma-separated; default -oauth-issuer
	OAuthIssuer           string        // -oauth-issuer: accept its access tokens
	OAuthAudience         string        // -oauth-audience; default -auth-resource
	OAuthJWKSURL          string        // -oauth-jwks-url; default the issuer's jwks_uri
	OAuthScopes           string        // -oauth-scopes, comma-separated: needed by every access token
	OAuthGroupsClaim      string        // -oauth-groups-claim; default mcpauth.DefaultGroupsClaim
	OAuthAlgorithms       string        // -oauth-algorithms, comma-separated; default mcpauth.DefaultAlgorithms
	OAuthLeeway           time.Duration // -oauth-leeway; default mcpauth.DefaultLeeway
	OAuthIntrospectionURL string        // -oauth-introspection-url; default the issuer's introspection_endpoint
	OAuthClientID         string        // -oauth-client-id: this server at the issuer, for introspection
	OAuthClientSecretFile string        // -oauth-client-secret-file
	Insecure              bool          // -insecure
	AuthFailures          int           // -auth-failures; 0: no limit
	RateLimit             Auto          // -rate-limit; auto: 20 beyond loopback, none on loopback; 0: none
	RateBurst             int           // -rate-burst; 0: 2×RateLimit
	AddrFile              string        // -addr-file
	MultiHost             bool          // -multi-host
	NATS                  string        // -nats
	Installation          string        // -installation
	BenchNoopTool         bool          // -bench-noop-tool (hidden: benchmarks only)
	Audit                 bool          // -audit; default true

	natsFlags        app.NATSFlags
	metricsListenSet bool // -metrics-listen was given (flag or environment)
}

// Sections of -help beyond flagenv.Common.
const (
	sectionServing = "Advanced: HTTP serving and its limits"
	sectionAuth    = "Advanced: authentication"
	sectionHosts   = "Advanced: several hosts (-multi-host)"
)

// flags declares o's flags on fs, with their defaults, and returns their
// layout in -help: the few flags most runs set first, the rest by topic.
// -bench-noop-tool is for benchmarks only (bench/doc.go): accepted, not in
// -help.
func (o *Options) flags(fs *flag.FlagSet) *flagenv.Help {
	var h flagenv.Help
	h.Section(flagenv.Common, fs, func() {
		fs.StringVar(&o.Config, "config", "", "configuration `file` (targets and tools), the same as the dispatcher's; without one, create_ticket files to the built-in local target")
		fs.StringVar(&o.DB, "db", DefaultDB, "SQLite database `path` shared with the dispatcher; one that does not exist is refused unless it is the default or -create-db is given")
		fs.BoolVar(&o.CreateDB, "create-db", false, "create the -db ledger if it does not exist (by default only the default path is created: a mistyped path would serve an empty ledger no dispatcher reads)")
		fs.StringVar(&o.Listen, "listen", "127.0.0.1:8080", "streamable HTTP `address`; the endpoint is /mcp")
		fs.BoolVar(&o.Stdio, "stdio", false, "serve MCP over stdin/stdout instead of HTTP")
		fs.StringVar(&o.MetricsListen, "metrics-listen", "127.0.0.1:9464", "Prometheus /metrics `address` (empty: off; off by default with -stdio)")
		fs.StringVar(&o.AuthTokensFile, "auth-tokens-file", "", "bearer tokens `file`: one \"subject:token\" (or bare token) per line; this or -oauth-issuer is required to listen beyond loopback")
		fs.StringVar(&o.LogLevel, "log-level", "info", "log `level`: debug, info, warn, error (logs go to stderr)")
	})
	h.Section(sectionServing, fs, func() {
		fs.StringVar(&o.AllowedOrigins, "allowed-origins", "", "comma-separated browser `origins` allowed besides loopback")
		fs.BoolVar(&o.Stateless, "stateless", false, "serve streamable HTTP without sessions for every protocol version (behind a load balancer); "+
			"by default 2025-11-25 clients get sessions and 2026-07-28 clients are served statelessly")
		fs.DurationVar(&o.SessionTimeout, "session-timeout", mcphttp.DefaultSessionTimeout, "close HTTP sessions idle this long (`duration`)")
		fs.DurationVar(&o.SessionUnusedTimeout, "session-unused-timeout", mcphttp.DefaultUnusedSessionTimeout, "close an HTTP session that made no call since its initialize after this long (`duration`; 0: only -session-timeout); a session that made a call is never closed for it")
		fs.IntVar(&o.EventStoreBytes, "event-store-bytes", mcphttp.DefaultEventStoreBytes, "memory `bytes` kept for resuming dropped SSE streams with Last-Event-ID (0: no resumption)")
		fs.DurationVar(&o.KeepAlive, "keepalive", 30*time.Second, "ping interval (`duration`) on sessions holding a GET stream open (0: no pings)")
		fs.IntVar(&o.KeepAliveFailures, "keepalive-failures", mcphttp.DefaultKeepAliveFailures, "close a session after `n` consecutive unanswered pings (sessions without a GET stream are never pinged)")
		fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", mcphttp.DefaultMaxBodyBytes, "largest HTTP request body in `bytes` (413 beyond); a body must arrive within 30 s per MiB of this, at least 30 s (408 beyond)")
		fs.IntVar(&o.MaxConns, "max-conns", DefaultMaxConns, "HTTP connections served at once (`n`); more wait to be accepted. 0 (default): no bound; beware that one client address can hold every slot of a bound, and each session's GET stream holds one")
		fs.IntVar(&o.MaxSessions, "max-sessions", mcphttp.DefaultMaxSessions, "live HTTP sessions at most (`n`); a new one beyond closes the oldest session that made no call since its initialize, or gets 503 if all made calls (0: no bound)")
		fs.IntVar(&o.MaxSessionsPerSubject, "max-sessions-per-subject", mcphttp.DefaultMaxSessionsPerSubject, "live HTTP sessions at most per bearer-token subject (`n`); a new one beyond closes the subject's oldest session that made no call, or gets 429 if all made calls (0: no bound)")
		fs.IntVar(&o.MaxSessionsPerAddress, "max-sessions-per-address", mcphttp.DefaultMaxSessionsPerAddress, "live HTTP sessions at most per client address (IPv4, or IPv6 /64) of requests without a token (`n`); a new one beyond closes the address's oldest session that made no call, or gets 429 if all made calls (0: no bound). Behind a proxy without tokens every client shares its address")
		o.RateLimit = Auto{}
		fs.Var(&o.RateLimit, "rate-limit", "HTTP requests per second (`n`) per client, token subject or IP; 0: no limit; default auto: 20 when -listen is beyond loopback, no limit on loopback")
		fs.IntVar(&o.RateBurst, "rate-burst", 0, "requests a client may send at once (`n`; 0: 2×rate-limit)")
		fs.StringVar(&o.AddrFile, "addr-file", "", "write the listening addresses as JSON to this `file` once serving (for scripts and tests)")
	})
	h.Section(sectionAuth, fs, func() {
		fs.StringVar(&o.AuthTokensEnv, "auth-tokens-env", "TICKETRELAY_AUTH_TOKENS", "environment `variable` holding bearer tokens, \"subject:token\" entries separated by commas")
		fs.StringVar(&o.AuthResource, "auth-resource", "", "canonical `URL` of this endpoint (https://host/mcp): with -auth-servers, serves OAuth protected-resource metadata")
		fs.StringVar(&o.AuthServers, "auth-servers", "", "comma-separated OAuth authorization server `URLs` for the protected-resource metadata (default: -oauth-issuer)")
		fs.StringVar(&o.OAuthIssuer, "oauth-issuer", "", "accept OAuth access tokens of this issuer (`URL`, exactly their iss) meant for -auth-resource: users sign in with it (see docs/security.md)")
		fs.StringVar(&o.OAuthAudience, "oauth-audience", "", "the `aud` access tokens must carry (default: -auth-resource; Entra ID v2 tokens carry the API's application id)")
		fs.StringVar(&o.OAuthJWKSURL, "oauth-jwks-url", "", "`URL` of the issuer's signing keys (default: the jwks_uri of its metadata)")
		fs.StringVar(&o.OAuthScopes, "oauth-scopes", "", "comma-separated `scopes` every access token must carry (403 insufficient_scope otherwise); advertised in the metadata")
		fs.StringVar(&o.OAuthGroupsClaim, "oauth-groups-claim", mcpauth.DefaultGroupsClaim, "access-token claim `name` that lists the user's groups")
		fs.StringVar(&o.OAuthAlgorithms, "oauth-algorithms", strings.Join(mcpauth.DefaultAlgorithms, ","), "comma-separated signature `algorithms` accepted on access tokens (asymmetric only)")
		fs.DurationVar(&o.OAuthLeeway, "oauth-leeway", mcpauth.DefaultLeeway, "clock skew (`duration`) allowed on access tokens' exp, nbf and iat (0: none; at most 5m)")
		fs.StringVar(&o.OAuthIntrospectionURL, "oauth-introspection-url", "", "RFC 7662 introspection `URL` for opaque access tokens (default: the issuer's introspection_endpoint; used with -oauth-client-id)")
		fs.StringVar(&o.OAuthClientID, "oauth-client-id", "", "this server's client `id` at the issuer, to introspect opaque access tokens (needs -oauth-client-secret-file)")
		fs.StringVar(&o.OAuthClientSecretFile, "oauth-client-secret-file", "", "`file` holding the secret of -oauth-client-id")
		fs.IntVar(&o.AuthFailures, "auth-failures", mcphttp.DefaultAuthFailureLimit.Burst, "requests without a valid token one client address may send in a row (`n`); then all its requests get 429, allowing one failure per second (0: no limit)")
		fs.BoolVar(&o.Audit, "audit", true, "record every tool call in the audit trail (the database's trail table; read it with dispatcher audit): who called, with which client, which tool and request_id, the outcome; never a token or a ticket's text")
		fs.BoolVar(&o.Insecure, "insecure", false, "allow listening beyond loopback without bearer tokens, and -metrics-listen beyond loopback (/metrics has no authentication)")
	})
	h.Section(sectionHosts, fs, func() {
		fs.BoolVar(&o.MultiHost, "multi-host", false, "one of several hosts of an installation: acceptance is decided by the cluster record on -nats before this host commits (needs -nats and -installation)")
		fs.StringVar(&o.NATS, "nats", "", "with -multi-host: `URL`s of the installation's NATS cluster")
		fs.StringVar(&o.Installation, "installation", "", "with -multi-host: the installation's `name` (as its dispatchers')")
		o.natsFlags = app.AddNATSFlags(fs, &o.NATS)
	})
	h.Hide(fs, func() {
		fs.BoolVar(&o.BenchNoopTool, "bench-noop-tool", false, "for benchmarks only: also serve "+mcptools.NoopToolPrefix+"<tool>, a twin of each create tool that validates its arguments and writes nothing")
	})
	return &h
}

// WithDefaults fills the fields whose default depends on another.
func (o Options) WithDefaults() Options {
	if o.Stdio && !o.metricsListenSet {
		o.MetricsListen = "" // several stdio instances must not race for one port
	}
	if o.RateLimit.IsAuto() {
		o.RateLimit = Auto{v: 0, set: true}
		if !app.IsLoopbackListen(o.Listen) {
			o.RateLimit.v = 20
		}
	}
	return o
}

// Validate checks o and the environment's NATS settings; every error is
// a usage error.
func (o Options) Validate(lookup func(string) (string, bool)) error {
	for _, n := range []int{o.MaxSessions, o.MaxSessionsPerSubject, o.MaxSessionsPerAddress, o.MaxConns, o.AuthFailures} {
		if n < 0 {
			return fmt.Errorf("%w: -max-sessions, -max-sessions-per-subject, -max-sessions-per-address, -max-conns and -auth-failures take a count ≥ 0", app.ErrUsage)
		}
	}
	if o.SessionUnusedTimeout < 0 {
		return fmt.Errorf("%w: -session-unused-timeout takes a duration ≥ 0", app.ErrUsage)
	}
	if err := o.natsFlags.Check(lookup); err != nil {
		return err
	}
	if !o.MultiHost {
		return nil
	}
	inst, err := installation.Parse(o.Installation)
	if err != nil {
		return fmt.Errorf("%w: -installation: %v", app.ErrUsage, err)
	}
	if o.NATS == "" || inst == installation.Embedded {
		return fmt.Errorf("%w: -multi-host needs -nats URL and -installation NAME (the same as the installation's dispatchers)", app.ErrUsage)
	}
	return nil
}

// checkLedger refuses a -db that does not exist, unless it is the
// default or -create-db asks for it: opening creates a missing database,
// and a mistyped path would serve tools whose tickets no dispatcher
// delivers.
func (o Options) checkLedger() error {
	_, err := os.Stat(o.DB)
	switch {
	case err == nil, o.CreateDB, o.DB == DefaultDB && errors.Is(err, os.ErrNotExist):
		return nil
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: -db %s: no ledger there; give the dispatcher's (its -data DIR/tickets.db), or pass -create-db for a new one", app.ErrUsage, o.DB)
	}
	return fmt.Errorf("-db: %w", err)
}

// httpConfig is the HTTP handler's configuration: the one place where
// the flags' "0: none" becomes mcphttp's "negative: none".
func (o Options) httpConfig() mcphttp.Config {
	return mcphttp.Config{
		AllowedOrigins:        app.SplitList(o.AllowedOrigins),
		Stateless:             o.Stateless,
		SessionTimeout:        o.SessionTimeout,
		EventStoreBytes:       noneIfZero(max(o.EventStoreBytes, 0)),
		KeepAlive:             o.KeepAlive,
		KeepAliveFailures:     o.KeepAliveFailures,
		MaxBodyBytes:          o.MaxBodyBytes,
		MaxSessions:           noneIfZero(o.MaxSessions),
		MaxSessionsPerSubject: noneIfZero(o.MaxSessionsPerSubject),
		MaxSessionsPerAddress: noneIfZero(o.MaxSessionsPerAddress),
		UnusedSessionTimeout:  noneIfZero(o.SessionUnusedTimeout),
		RateLimit:             mcphttp.RateLimit{PerSecond: o.RateLimit.v, Burst: o.RateBurst},
	}
}

// noneIfZero turns a flag's 0 ("none") into a Config's -1 (its 0 is "the
// default").
func noneIfZero[T int | int64 | time.Duration](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// Auto is a number flag whose default, "auto", is worked out from other
// flags. -1 is taken as auto too (the flag's default once was -1).
type Auto struct {
	v   float64
	set bool
}

// IsAuto reports whether the value is still to be worked out.
func (a Auto) IsAuto() bool { return !a.set }

func (a *Auto) String() string {
	if a == nil || !a.set {
		return "auto"
	}
	return strconv.FormatFloat(a.v, 'g', -1, 64)
}

func (a *Auto) Set(s string) error {
	if s == "auto" {
		*a = Auto{}
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("want a number or auto")
	}
	if v < 0 {
		*a = Auto{}
		return nil
	}
	*a = Auto{v: v, set: true}
	return nil
}
