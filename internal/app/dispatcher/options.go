package dispatcher

import (
	"cmp"
	"flag"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/installation"
	"ticketrelay/internal/app"
	"ticketrelay/internal/flagenv"
	"ticketrelay/internal/maintenance"
)

// Options are the dispatcher's settings, one field per flag. A flag's
// default is the field's default; a field whose default depends on
// another (DB on Data, Replicas on MultiHost) is left zero by its flag and
// filled by WithDefaults. Validate checks them before anything is built.
type Options struct {
	DB              string        // -db; default Data/tickets.db
	Data            string        // -data; default "data"
	NATS            string        // -nats; empty: an embedded server
	MultiHost       bool          // -multi-host
	Replicas        int           // -replicas; default 3 with MultiHost, else 1
	HostDeadAfter   time.Duration // -host-dead-after; default 30s
	BucketMaxBytes  int64         // -bucket-max-bytes; 0 (or negative): no bound
	Installation    string        // -installation; empty: the embedded server's names
	NATSListen      string        // -nats-listen; default 127.0.0.1:4222
	NATSStageDir    string        // -nats-stage-dir; default "auto"
	MetricsListen   string        // -metrics-listen; default 127.0.0.1:9465, empty: off
	ConsoleListen   string        // -console-listen; default 127.0.0.1:9470, empty: off
	ConsoleTokens   string        // -console-tokens-file: operators' sign-in tokens
	ConsoleURL      string        // -console-url: the console as browsers reach it
	ConsoleOAuth    ConsoleOAuth  // -console-oauth-*: operators sign in at an issuer
	Config          string        // -config; empty: the local target only
	LogLevel        string        // -log-level; default info
	LeaseTTL        time.Duration // -lease-ttl; default 15s
	DupWindow       time.Duration // -dup-window; default 30m
	StreamMaxAge    time.Duration // -stream-max-age; default 7 days
	Workers         int           // -workers; 0: per target (forwarder.DefaultWorkers for an API)
	MaxAttempts     int           // -max-attempts; default 10
	RetryBase       time.Duration // -retry-base; default 1s
	RetryMax        time.Duration // -retry-max; default 5m
	DeliveryTimeout time.Duration // -delivery-timeout; default 30s
	Retention       time.Duration // -retention; default 24h
	PollInterval    time.Duration // -poll-interval; default 20ms
	AuditAfter      time.Duration // -audit-after; default 5m
	AuditRetention  time.Duration // -audit-retention; default 90 days
	AuditFile       string        // -audit-file; empty: no file
	AddrFile        string        // -addr-file
	Insecure        bool          // -insecure

	broker app.NATSFlags // -nats-creds, -nats-user, -nats-tls-*
}

// ConsoleOAuth is the console's OAuth sign-in (-console-oauth-*).
type ConsoleOAuth struct {
	Issuer           string // -console-oauth-issuer; empty: no OAuth sign-in
	ClientID         string // -console-oauth-client-id
	ClientSecretFile string // -console-oauth-client-secret-file
	Scope            string // -console-oauth-scope; default DefaultOperatorScope
	Audience         string // -console-oauth-audience; default -console-url
}

// DefaultOperatorScope is the scope an operator's access token must carry.
const DefaultOperatorScope = "ticketrelay:operate"

// DefaultConsoleListen is where the operator console listens unless told.
// Taken by another process (another dispatcher on this host), the
// dispatcher runs without a console and says so; an address given in its
// place must be free.
const DefaultConsoleListen = "127.0.0.1:9470"

// Sections of -help beyond flagenv.Common.
const (
	sectionDelivery = "Advanced: delivery"
	sectionStore    = "Advanced: relay, JetStream and the ledger"
	sectionHosts    = "Advanced: several hosts (-multi-host) and an external NATS server (-nats)"
	sectionMisc     = "Advanced: listeners and scripts"
	sectionTrail    = "Advanced: the audit trail"
	sectionConsole  = "Advanced: the operator console's sign-in at an OAuth issuer"
)

// flags declares o's flags on fs, with their defaults, and returns their
// layout in -help: the few flags most runs set first, the rest by topic.
func (o *Options) flags(fs *flag.FlagSet) *flagenv.Help {
	var h flagenv.Help
	h.Section(flagenv.Common, fs, func() {
		fs.StringVar(&o.Config, "config", "", "configuration `file` (targets and tools), the same as mcp-front's; without one, tickets go to the built-in local target (DATA/tickets.jsonl)")
		fs.StringVar(&o.Data, "data", "data", "data `directory`: JetStream store, local target file")
		fs.StringVar(&o.DB, "db", "", "SQLite database `path` shared with mcp-front (default DATA/tickets.db)")
		fs.StringVar(&o.NATS, "nats", "", "`URL` of an existing NATS server with JetStream; empty runs an embedded one")
		fs.StringVar(&o.Installation, "installation", "", "`name` of this installation on a shared NATS server (-nats): its stream, subjects and consumers carry it; required with -nats")
		fs.StringVar(&o.NATSListen, "nats-listen", "127.0.0.1:4222", "client `address` of the embedded nats-server (port 0: any free port)")
		fs.StringVar(&o.MetricsListen, "metrics-listen", "127.0.0.1:9465", "Prometheus /metrics `address` (empty: off)")
		fs.StringVar(&o.ConsoleListen, "console-listen", DefaultConsoleListen, "operator console `address` (empty: off); beyond loopback it needs -console-tokens-file or -console-oauth-issuer")
		fs.StringVar(&o.ConsoleTokens, "console-tokens-file", "", "operator tokens `file` for the console's sign-in: one \"subject:token\" (or bare token) per line, as mcp-front's -auth-tokens-file")
		fs.StringVar(&o.LogLevel, "log-level", "info", "log `level`: debug, info, warn, error (logs go to stderr)")
	})
	h.Section(sectionDelivery, fs, func() {
		fs.IntVar(&o.Workers, "workers", 0, "most concurrent deliveries per target (`n`; 0: 64; an API starts at 16 and climbs while its latency stays flat)")
		fs.IntVar(&o.MaxAttempts, "max-attempts", 10, "downstream calls per request (`n`) before it fails (calls refused by a rate limit do not count)")
		fs.DurationVar(&o.RetryBase, "retry-base", time.Second, "first retry delay (`duration`; doubles, with jitter)")
		fs.DurationVar(&o.RetryMax, "retry-max", 5*time.Minute, "longest retry delay (`duration`)")
		fs.DurationVar(&o.DeliveryTimeout, "delivery-timeout", 30*time.Second, "time limit (`duration`) of one downstream call")
		fs.DurationVar(&o.AuditAfter, "audit-after", 5*time.Minute, "how long (`duration`) after its publish (or its last attempt) a message not yet delivered is looked up in the stream, and published again if the stream lost it (longer than the broker's sync interval and -delivery-timeout)")
	})
	h.Section(sectionStore, fs, func() {
		fs.DurationVar(&o.LeaseTTL, "lease-ttl", 15*time.Second, "relay lease `duration`: how long a crashed relay's successor may wait")
		fs.DurationVar(&o.PollInterval, "poll-interval", 20*time.Millisecond, "how often (`duration`) the relay looks for new outbox rows when no commit has woken it")
		fs.DurationVar(&o.DupWindow, "dup-window", 30*time.Minute, "JetStream duplicate window (`duration`, >= 30m)")
		fs.DurationVar(&o.StreamMaxAge, "stream-max-age", 7*24*time.Hour, "how long (`duration`) JetStream keeps a message (>= -dup-window)")
		fs.DurationVar(&o.Retention, "retention", 24*time.Hour, "how long (`duration`, >= 30m) a settled request is remembered; a request_id reused after it is a new request")
		fs.IntVar(&o.Replicas, "replicas", 0, "replicas (`n`) of the stream and, with -multi-host, of the request bucket (0: 3 with -multi-host, else 1)")
		fs.StringVar(&o.NATSStageDir, "nats-stage-dir", "auto", "`directory` on a memory filesystem where the embedded nats-server stages atomic batches (auto: one under "+natsjs.DefaultStageRoot+" if it exists; empty: in the store, on disk)")
	})
	h.Section(sectionTrail, fs, func() {
		fs.DurationVar(&o.AuditRetention, "audit-retention", 90*24*time.Hour, "how long (`duration`, >= 1h) the audit trail keeps an entry (and, with -multi-host, the trail stream a message)")
		fs.StringVar(&o.AuditFile, "audit-file", "", "append the audit trail to this `file` as JSON lines, for a log shipper to follow (resumes where it stopped; follows rotation by rename)")
	})
	h.Section(sectionConsole, fs, func() {
		fs.StringVar(&o.ConsoleURL, "console-url", "", "the console's `URL` as operators' browsers reach it (https://ops.example.com/): the issuer sends them back to its /oauth/callback")
		fs.StringVar(&o.ConsoleOAuth.Issuer, "console-oauth-issuer", "", "sign operators in at this OAuth issuer (`URL`), as a client of it (authorization code with PKCE); needs -console-url and -console-oauth-client-*")
		fs.StringVar(&o.ConsoleOAuth.ClientID, "console-oauth-client-id", "", "the console's client `id` at the issuer (a confidential client whose redirect URI is -console-url's /oauth/callback)")
		fs.StringVar(&o.ConsoleOAuth.ClientSecretFile, "console-oauth-client-secret-file", "", "`file` holding the secret of -console-oauth-client-id")
		fs.StringVar(&o.ConsoleOAuth.Scope, "console-oauth-scope", DefaultOperatorScope, "the operator `scope`: asked for at sign-in, and required of the access token")
		fs.StringVar(&o.ConsoleOAuth.Audience, "console-oauth-audience", "", "what the access token's aud must name (`value`; default -console-url)")
	})
	h.Section(sectionHosts, fs, func() {
		fs.BoolVar(&o.MultiHost, "multi-host", false, "one of several hosts of an installation on a replicated NATS cluster (-nats, -installation): every host's forwarder delivers every host's tickets, through the cluster record")
		fs.DurationVar(&o.HostDeadAfter, "host-dead-after", 30*time.Second, "with -multi-host: how long (`duration`) a host may stay silent before the other hosts publish and deliver what it left")
		fs.Int64Var(&o.BucketMaxBytes, "bucket-max-bytes", 0, "with -multi-host: size limit of the request bucket in `bytes` (0: none); new requests are refused from 90% on, with an alert before")
		o.broker = app.AddNATSFlags(fs, &o.NATS)
	})
	h.Section(sectionMisc, fs, func() {
		fs.StringVar(&o.AddrFile, "addr-file", "", "write the listening addresses as JSON to this `file` once serving (for scripts and tests)")
		fs.BoolVar(&o.Insecure, "insecure", false, "allow -metrics-listen beyond loopback (/metrics has no authentication), and -console-listen beyond loopback without sign-in")
	})
	return &h
}

// WithDefaults fills the fields whose default depends on another.
func (o Options) WithDefaults() Options {
	o.DB = cmp.Or(o.DB, filepath.Join(o.Data, "tickets.db"))
	replicas := 1
	if o.MultiHost {
		replicas = 3
	}
	o.Replicas = cmp.Or(o.Replicas, replicas)
	return o
}

// stream is the stream's configuration; its Owner is set once the ledger
// is open.
func (o Options) stream() natsjs.StreamConfig {
	inst, _ := installation.Parse(o.Installation) // Validate checked it
	return natsjs.StreamConfig{Installation: inst, Duplicates: o.DupWindow, MaxAge: o.StreamMaxAge, Replicas: o.Replicas}.WithDefaults()
}

func (o Options) retention() maintenance.RetentionConfig {
	return maintenance.RetentionConfig{Keep: o.Retention}.WithDefaults()
}

// Validate checks o (after WithDefaults) and the environment's NATS
// settings; every error is a usage error.
func (o Options) Validate(lookup func(string) (string, bool)) error {
	if err := o.broker.Check(lookup); err != nil {
		return err
	}
	inst, err := installation.Parse(o.Installation)
	if err != nil {
		return fmt.Errorf("%w: -installation: %v", app.ErrUsage, err)
	}
	var problem string
	switch {
	case o.NATS != "" && inst == installation.Embedded:
		// Two installations on one server with the same names take each
		// other's messages; the embedded server's names are its own.
		problem = "-nats needs -installation NAME: a NATS server may be shared, and every installation on it needs names of its own"
	case o.HostDeadAfter < time.Second:
		problem = "-host-dead-after must be at least 1s"
	case o.MultiHost && o.NATS == "":
		problem = "-multi-host needs -nats: the hosts of an installation share a NATS cluster"
	case o.AuditAfter <= o.DeliveryTimeout:
		problem = fmt.Sprintf("-audit-after %s must be longer than -delivery-timeout %s: the audit must never take a request whose attempt is still running for one the forwarder let go",
			o.AuditAfter, o.DeliveryTimeout)
	case o.AuditRetention < MinAuditRetention:
		problem = fmt.Sprintf("-audit-retention %s: keep the audit trail at least %s", o.AuditRetention, MinAuditRetention)
	case o.ConsoleListen != "" && !app.IsLoopbackListen(o.ConsoleListen) && o.ConsoleTokens == "" && o.ConsoleOAuth.Issuer == "" && !o.Insecure:
		// Whoever reaches it could redrive and settle requests.
		problem = fmt.Sprintf("refusing to serve the console on %s beyond loopback without sign-in: give -console-tokens-file or -console-oauth-issuer, "+
			"or listen on loopback (the default) and reach it through a tunnel, or pass -insecure", o.ConsoleListen)
	case o.NATS == "" && !app.IsLoopbackListen(o.NATSListen):
		// Its traffic (every ticket) is not encrypted.
		problem = fmt.Sprintf("-nats-listen %s: the embedded nats-server has no TLS, so it listens on loopback only; "+
			"to share the stream beyond this host, run a NATS server with TLS and credentials and give its URL as -nats", o.NATSListen)
	}
	if problem != "" {
		return fmt.Errorf("%w: %s", app.ErrUsage, problem)
	}
	if err := o.validateConsoleOAuth(); err != nil {
		return err
	}
	return o.validateRetention()
}

// validateRetention checks the stream's and the ledger's memories agree.
func (o Options) validateRetention() error {
	stream, retention := o.stream(), o.retention()
	if err := stream.Validate(); err != nil {
		return fmt.Errorf("%w: %v", app.ErrUsage, err)
	}
	if err := retention.Validate(); err != nil {
		return fmt.Errorf("%w: %v", app.ErrUsage, err)
	}
	if stream.Duplicates > retention.Keep {
		return fmt.Errorf("%w: -dup-window %s is longer than -retention %s: the ledger must remember a request at least as long as JetStream does",
			app.ErrUsage, stream.Duplicates, retention.Keep)
	}
	return nil
}

// validateConsoleOAuth checks the -console-oauth-* flags come whole.
func (o Options) validateConsoleOAuth() error {
	c := o.ConsoleOAuth
	var problem string
	switch {
	case c.Issuer == "" && (c.ClientID != "" || c.ClientSecretFile != "" || c.Audience != ""):
		problem = "-console-oauth-client-id, -client-secret-file and -audience need -console-oauth-issuer"
	case c.Issuer == "":
		return nil
	case !isHTTPURL(c.Issuer):
		problem = fmt.Sprintf("-console-oauth-issuer %q: want an http(s) URL", c.Issuer)
	case !isHTTPURL(o.ConsoleURL):
		problem = fmt.Sprintf("-console-oauth-issuer needs -console-url, the console's http(s) URL as browsers reach it (the issuer redirects to its /oauth/callback); got %q", o.ConsoleURL)
	case c.ClientID == "" || c.ClientSecretFile == "":
		problem = "-console-oauth-issuer needs -console-oauth-client-id and -console-oauth-client-secret-file: the console's registration at the issuer"
	case strings.TrimSpace(c.Scope) == "" || strings.ContainsAny(c.Scope, " \t"):
		problem = fmt.Sprintf("-console-oauth-scope %q: want one scope", c.Scope)
	}
	if problem != "" {
		return fmt.Errorf("%w: %s", app.ErrUsage, problem)
	}
	return nil
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
