// Package targets is the list of all downstream adapters: it turns target
// definitions into downstream.Target values and tells the MCP front end each
// target's capabilities without opening it (and without any network). It
// sits above delivery/downstream/<kind> because Go forbids downstream importing its
// children.
package targets

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/github"
	"ticketrelay/delivery/downstream/jira"
	"ticketrelay/delivery/downstream/local"
	"ticketrelay/delivery/downstream/pagerduty"
	"ticketrelay/delivery/downstream/redmine"
	"ticketrelay/delivery/downstream/slack"
	"ticketrelay/delivery/downstream/webhook"
	"ticketrelay/delivery/downstream/zendesk"
	"ticketrelay/tracing"
)

// DefaultName is the target used when none is configured.
const DefaultName = "local"

// DefaultTimeout bounds one HTTP call of a target that sets no timeout.
const DefaultTimeout = 20 * time.Second

// Def is one configured target, with its secrets resolved. The comment on
// each field names the kinds that use it; Secret fields never print their
// value.
type Def struct {
	Name string
	Kind string
	// Endpoint is the API's base URL (webhook: the URL to post to). Empty:
	// the kind's public host where it has one (github, pagerduty).
	Endpoint string
	// Timeout bounds one HTTP call (0: DefaultTimeout).
	Timeout time.Duration
	// RateLimit paces the calls to the API (zero: none; the forwarder
	// enforces it, see RateLimits).
	RateLimit downstream.RateLimit
	// Caller is what the target's tickets say of who asked ("": none);
	// CallerField only for kinds with such a field (see kind.CallerField).
	Caller downstream.CallerMode

	Path          string            // local: the file (default DATA/tickets.jsonl)
	Email         string            // zendesk, jira: the API token's user
	Owner, Repo   string            // github
	Project       string            // jira: project key; redmine: project identifier
	IssueType     string            // jira: issue type name (default Task)
	Source        string            // pagerduty: payload.source (default ticketrelay)
	Token         downstream.Secret // zendesk, jira, github: API token; redmine: API key; webhook: optional bearer token
	SigningSecret downstream.Secret // webhook: optional Standard Webhooks secret (whsec_…)
	NoDedupe      bool              // webhook: the receiver does not honour Idempotency-Key
	RoutingKey    downstream.Secret // pagerduty: Events API v2 integration key
	APIToken      downstream.Secret // pagerduty: optional REST API key (incident lookups before a late resend)
	APIEndpoint   string            // pagerduty: REST API base URL (empty: the public REST host; only with APIToken)
	WebhookURL    downstream.Secret // slack: the incoming webhook URL
	TrackerID     int               // redmine: tracker of new issues (0: the project's first)
	CustomFieldID int               // redmine: issue custom field holding the dedupe key (0: a subject marker)
	PriorityIDs   map[string]int    // redmine: ticket priority → Redmine priority id (unmapped: Redmine's default)
	// What comments and updates need (decisions 0170-0176).
	OpenStatusID, ClosedStatusID int                        // redmine: statuses an update reopens or closes to (0: Redmine's first open, first closed)
	PriorityRefs                 map[string]string          // jira: ticket priority → priority name; pagerduty: → priority id
	PublicComments               bool                       // zendesk: comments are public replies, not internal notes
	From                         string                     // pagerduty: the user notes and updates are made as
	WebURL                       string                     // pagerduty: the account's web address; slack: the workspace's
	BotToken                     downstream.Secret          // slack: bot token for thread replies
	Channel                      string                     // slack: channel id a bare ts refers to
	Fields                       map[string]json.RawMessage // jira: fixed values of other fields on every create
}

// kind describes one adapter.
type kind struct {
	Capabilities downstream.Capabilities
	// DefaultEndpoint is used when a Def has none ("": none, or not HTTP).
	DefaultEndpoint string
	// HTTP: the kind calls an HTTP API (Endpoint and Timeout apply).
	HTTP bool
	// CallerField: the API has a field for who asked a ticket that
	// downstream.CallerField fills (Zendesk's requester).
	CallerField bool
	open        func(d Def, hc downstream.HTTPConfig) (downstream.Target, error)
}

// kinds lists every adapter by kind name.
var kinds = map[string]kind{
	"local": {Capabilities: local.Capabilities},
	"webhook": {Capabilities: webhook.Capabilities, HTTP: true,
		open: func(d Def, hc downstream.HTTPConfig) (downstream.Target, error) {
			return webhook.New(webhook.Config{Name: d.Name, URL: d.Endpoint, SigningSecret: d.SigningSecret, Token: d.Token,
				NoDedupe: d.NoDedupe, HTTPConfig: hc})
		}},
	"zendesk": {Capabilities: zendesk.Capabilities, HTTP: true, CallerField: true,
		open: func(d Def, hc downstream.HTTPConfig) (downstream.Target, error) {
			return zendesk.New(zendesk.Config{Name: d.Name, BaseURL: d.Endpoint, Email: d.Email, Token: d.Token,
				PublicComments: d.PublicComments, HTTPConfig: hc})
		}},
	"pagerduty": {Capabilities: pagerduty.Capabilities, HTTP: true, DefaultEndpoint: pagerduty.DefaultBaseURL,
		open: func(d Def, hc downstream.HTTPConfig) (downstream.Target, error) {
			return pagerduty.New(pagerduty.Config{Name: d.Name, BaseURL: d.Endpoint, RoutingKey: d.RoutingKey, Source: d.Source,
				APIToken: d.APIToken, APIBaseURL: d.APIEndpoint, From: d.From, WebURL: d.WebURL, PriorityIDs: d.PriorityRefs, HTTPConfig: hc})
		}},
	"github": {Capabilities: github.Capabilities, HTTP: true, DefaultEndpoint: github.DefaultBaseURL,
		open: func(d Def, hc downstream.HTTPConfig) (downstream.Target, error) {
			return github.New(github.Config{Name: d.Name, BaseURL: d.Endpoint, Owner: d.Owner, Repo: d.Repo, Token: d.Token, HTTPConfig: hc})
		}},
	"jira": {Capabilities: jira.Capabilities, HTTP: true,
		open: func(d Def, hc downstream.HTTPConfig) (downstream.Target, error) {
			return jira.New(jira.Config{Name: d.Name, BaseURL: d.Endpoint, Email: d.Email, Token: d.Token,
				Project: d.Project, IssueType: d.IssueType, PriorityNames: d.PriorityRefs, Fields: d.Fields, HTTPConfig: hc})
		}},
	"redmine": {Capabilities: redmine.Capabilities, HTTP: true,
		open: func(d Def, hc downstream.HTTPConfig) (downstream.Target, error) {
			return redmine.New(redmine.Config{Name: d.Name, BaseURL: d.Endpoint, APIKey: d.Token, Project: d.Project,
				TrackerID: d.TrackerID, CustomFieldID: d.CustomFieldID, PriorityIDs: d.PriorityIDs,
				OpenStatusID: d.OpenStatusID, ClosedStatusID: d.ClosedStatusID, HTTPConfig: hc})
		}},
	"slack": {Capabilities: slack.Capabilities, HTTP: true,
		open: func(d Def, hc downstream.HTTPConfig) (downstream.Target, error) {
			return slack.New(slack.Config{Name: d.Name, WebhookURL: d.WebhookURL, BotToken: d.BotToken, Channel: d.Channel,
				APIBaseURL: d.APIEndpoint, WorkspaceURL: d.WebURL, HTTPConfig: hc})
		}},
}

// IsHTTP reports whether kind calls an HTTP API (Endpoint and Timeout apply).
func IsHTTP(kind string) bool { return kinds[kind].HTTP }

// KindNames returns the kind names, sorted.
func KindNames() []string {
	out := make([]string, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// callerFieldKinds are the kinds that take caller: field, sorted.
func callerFieldKinds() []string {
	var out []string
	for _, name := range KindNames() {
		if kinds[name].CallerField {
			out = append(out, name)
		}
	}
	return out
}

// CallerModes maps each target of defs to its caller option (what the
// forwarder applies, forwarder.Config.Callers); a target not named says
// nothing of its caller.
func CallerModes(defs []Def) map[string]downstream.CallerMode {
	out := map[string]downstream.CallerMode{}
	for _, d := range defs {
		if d.Caller != "" && d.Caller != downstream.CallerNone {
			out[d.Name] = d.Caller
		}
	}
	return out
}

// DefaultDefs is the zero-config set: one local target.
func DefaultDefs() []Def { return []Def{{Name: DefaultName, Kind: "local"}} }

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Validate checks a definition without opening anything or touching the
// network: the name, the kind, and what the kind's adapter requires.
func (d Def) Validate() error {
	if err := d.ValidateShape(); err != nil {
		return err
	}
	k := kinds[d.Kind]
	if k.open == nil {
		return nil
	}
	_, err := k.open(d.withDefaults(), downstream.HTTPConfig{}) // constructors validate; none dials
	return err
}

// ValidateShape checks what needs no secret: the name, the kind, the
// endpoint's form and the timeout. A definition read without its secrets
// (mcp-front, which delivers nothing) can pass only this; Validate also
// needs the secrets. Whatever needs no secret is checked here, so that
// mcp-front never starts on a file the dispatcher would refuse for it.
// Every problem is reported (errors.Join), each as a *FieldError.
func (d Def) ValidateShape() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	if !nameRE.MatchString(d.Name) {
		bad("name", "target name %q: use 1-63 lowercase letters, digits, '-' or '_'", d.Name)
	}
	if _, ok := kinds[d.Kind]; !ok {
		bad("kind", "target %q: unknown kind %q (known: %s)", d.Name, d.Kind, strings.Join(KindNames(), ", "))
	}
	if k, ok := kinds[d.Kind]; ok && d.Caller == downstream.CallerField && !k.CallerField {
		bad("caller", "target %q (%s): caller: field is not available for this kind, whose API has no field for who asked; "+
			"use footer or none (field: %s)", d.Name, d.Kind, strings.Join(callerFieldKinds(), ", "))
	} else if _, err := downstream.ParseCallerMode(string(d.Caller)); err != nil {
		bad("caller", "target %q: %w", d.Name, err)
	}
	if d.Timeout < 0 {
		bad("timeout", "target %q: timeout %v is negative", d.Name, d.Timeout)
	}
	if err := d.RateLimit.Validate(); err != nil {
		bad("rate_limit", "target %q: rate_limit: %w", d.Name, err)
	}
	for _, f := range []struct{ field, url string }{{"endpoint", d.Endpoint}, {"options.api_endpoint", d.APIEndpoint}} {
		if u, err := url.Parse(f.url); f.url != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			bad(f.field, "target %q (%s): %s is not an http(s) URL with a host (e.g. https://tickets.example.com)",
				d.Name, d.Kind, strings.TrimPrefix(f.field, "options."))
		}
	}
	return errors.Join(errs...)
}

// FieldError is a problem with one field of a Def. Field names it as the
// configuration file writes it (name, kind, endpoint, timeout, rate_limit,
// options.api_endpoint), so that the file's reader can point at its line.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func (d Def) withDefaults() Def {
	if k := kinds[d.Kind]; d.Endpoint == "" {
		d.Endpoint = k.DefaultEndpoint
	}
	if d.Timeout == 0 {
		d.Timeout = DefaultTimeout
	}
	return d
}

// CapabilitiesOf reports what the target of d can guarantee, by its kind
// and what its definition declares: no network, no secrets needed.
func CapabilitiesOf(d Def) (downstream.Capabilities, error) {
	k, ok := kinds[d.Kind]
	if !ok {
		return downstream.Capabilities{}, fmt.Errorf("target %q: unknown kind %q (known: %s)", d.Name, d.Kind, strings.Join(KindNames(), ", "))
	}
	if d.Kind == "webhook" && d.NoDedupe {
		return webhook.CapabilitiesNoDedupe, nil
	}
	return k.Capabilities, nil
}

// CapabilitiesByName maps each target name to its capabilities: what the MCP
// front end needs to annotate the tool bound to each target.
func CapabilitiesByName(defs []Def) (map[string]downstream.Capabilities, error) {
	out := make(map[string]downstream.Capabilities, len(defs))
	for _, d := range defs {
		c, err := CapabilitiesOf(d)
		if err != nil {
			return nil, err
		}
		out[d.Name] = c
	}
	return out, nil
}

// RateLimits maps the name of each target of defs that has a rate limit
// to it: what the forwarder enforces (forwarder.Config.RateLimits).
func RateLimits(defs []Def) map[string]downstream.RateLimit {
	out := map[string]downstream.RateLimit{}
	for _, d := range defs {
		if !d.RateLimit.IsZero() {
			out[d.Name] = d.RateLimit
		}
	}
	return out
}

// Open builds the targets of defs; dataDir holds local files. Each HTTP
// target gets its own *http.Client with the Def's timeout and its own
// connection pool (see WithWorkers, WithMetrics). The returned function
// closes what Open opened, the pools' idle connections included.
func Open(defs []Def, dataDir string, now func() time.Time, opts ...Option) ([]downstream.Target, func() error, error) {
	oc := openConfig{conns: defaultConns}
	for _, o := range opts {
		o(&oc)
	}
	var out []downstream.Target
	var closers []func() error
	closeAll := func() error {
		var errs []error
		for _, c := range closers {
			errs = append(errs, c())
		}
		return errors.Join(errs...)
	}
	for _, d := range defs {
		if err := d.Validate(); err != nil {
			closeAll()
			return nil, nil, err
		}
		d = d.withDefaults()
		if d.Kind == "local" {
			path := d.Path
			if path == "" {
				path = filepath.Join(dataDir, "tickets.jsonl")
			}
			t, err := local.Open(d.Name, path, now)
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			out = append(out, t)
			closers = append(closers, t.Close)
			continue
		}
		tr := newTransport(d.Name, oc.conns, oc.metrics)
		// With tracing on, each call is a span and carries its traceparent.
		rt := tracing.Transport(tr, d.Name)
		t, err := kinds[d.Kind].open(d, downstream.HTTPConfig{HTTP: &http.Client{Timeout: d.Timeout, Transport: rt}, Now: now})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		out = append(out, t)
		closers = append(closers, func() error { tr.CloseIdleConnections(); return nil })
	}
	return out, closeAll, nil
}
