package config

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"ticketrelay/downstream"
	"ticketrelay/targets"
	"ticketrelay/ticket"
)

// envNameRE is what an _env option's value must look like: an
// environment variable name. upperEnvNameRE is the conventional form, the
// only one an error shows.
var (
	envNameRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	upperEnvNameRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
)

// tokenPrefixes start credentials that also pass as variable names
// (GitHub's tokens).
var tokenPrefixes = []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"}

// checkEnvName says why v cannot be the name of an _env option's variable,
// without showing v: a value written there by mistake is often the secret.
func checkEnvName(v string) error {
	if !envNameRE.MatchString(v) {
		return errors.New("its value is not a variable name (letters, digits and _, not starting with a digit) and is not shown")
	}
	for _, p := range tokenPrefixes {
		if strings.HasPrefix(v, p) {
			return fmt.Errorf("its value starts with %q, as a GitHub token does, and is not shown", p)
		}
	}
	return nil
}

// shownEnvName is v for an error if it has the conventional form of a
// variable name (upper case), else a placeholder: a name with lower-case
// letters may be a secret written in place of the name.
func shownEnvName(v string) string {
	if upperEnvNameRE.MatchString(v) {
		return v
	}
	return "(name not shown: it has lower-case letters and may be a secret)"
}

// option is one key of a target's options.
type option struct {
	name     string
	required bool
	// set stores a plain value; parse stores a value it may refuse; secret
	// stores the value of the environment variable an _env option names.
	set    func(d *targets.Def, v string)
	parse  func(d *targets.Def, v string) error
	secret func(d *targets.Def, s downstream.Secret)
}

func (o option) env() bool { return o.secret != nil }

var (
	optEmail    = option{name: "email", required: true, set: func(d *targets.Def, v string) { d.Email = v }}
	optTokenEnv = option{name: "token_env", required: true, secret: func(d *targets.Def, s downstream.Secret) { d.Token = s }}
)

// kindOptions lists the options of each kind.
var kindOptions = map[string][]option{
	"local": {{name: "path", set: func(d *targets.Def, v string) { d.Path = v }}},
	"webhook": {
		{name: "signing_secret_env", secret: func(d *targets.Def, s downstream.Secret) { d.SigningSecret = s }},
		{name: "token_env", secret: func(d *targets.Def, s downstream.Secret) { d.Token = s }},
		{name: "receiver_dedupes", parse: func(d *targets.Def, v string) error {
			dedupes, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%q is not true or false", v)
			}
			d.NoDedupe = !dedupes
			return nil
		}},
	},
	"zendesk": {optEmail, optTokenEnv},
	"pagerduty": {
		{name: "routing_key_env", required: true, secret: func(d *targets.Def, s downstream.Secret) { d.RoutingKey = s }},
		{name: "source", set: func(d *targets.Def, v string) { d.Source = v }},
		// Optional: a REST API key, so that a late resend looks the incident
		// up instead of paging again after the alert was resolved.
		{name: "api_token_env", secret: func(d *targets.Def, s downstream.Secret) { d.APIToken = s }},
		{name: "api_endpoint", set: func(d *targets.Def, v string) { d.APIEndpoint = v }},
	},
	"github": {
		{name: "owner", required: true, set: func(d *targets.Def, v string) { d.Owner = v }},
		{name: "repo", required: true, set: func(d *targets.Def, v string) { d.Repo = v }},
		optTokenEnv,
	},
	"jira": {
		optEmail, optTokenEnv,
		{name: "project", required: true, set: func(d *targets.Def, v string) { d.Project = v }},
		{name: "issue_type", set: func(d *targets.Def, v string) { d.IssueType = v }},
	},
	"redmine": {
		{name: "api_key_env", required: true, secret: func(d *targets.Def, s downstream.Secret) { d.Token = s }},
		{name: "project", required: true, set: func(d *targets.Def, v string) { d.Project = v }},
		{name: "tracker_id", parse: func(d *targets.Def, v string) (err error) { d.TrackerID, err = positive(v); return err }},
		{name: "custom_field_id", parse: func(d *targets.Def, v string) (err error) { d.CustomFieldID, err = positive(v); return err }},
		{name: "priority_ids", parse: func(d *targets.Def, v string) (err error) { d.PriorityIDs, err = priorityIDs(v); return err }},
	},
	"slack": {
		{name: "webhook_url_env", required: true, secret: func(d *targets.Def, s downstream.Secret) { d.WebhookURL = s }},
	},
}

// endpointRequired: kinds with no public default host.
var endpointRequired = map[string]bool{"webhook": true, "zendesk": true, "jira": true, "redmine": true}

// positive parses an id.
func positive(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive integer", v)
	}
	return n, nil
}

// priorityIDs parses "low=1, normal=2, high=3, urgent=4": ticket
// priorities to the downstream's ids.
func priorityIDs(v string) (map[string]int, error) {
	m := map[string]int{}
	for item := range strings.SplitSeq(v, ",") {
		name, id, ok := strings.Cut(strings.TrimSpace(item), "=")
		name = strings.TrimSpace(name)
		if !ok || !slices.Contains(ticket.Priorities, name) {
			return nil, fmt.Errorf("%q: want priority=id pairs separated by commas, priorities among %s", item, strings.Join(ticket.Priorities, ", "))
		}
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf("priority %q is mapped twice", name)
		}
		n, err := positive(strings.TrimSpace(id))
		if err != nil {
			return nil, fmt.Errorf("priority %s: %w", name, err)
		}
		m[name] = n
	}
	return m, nil
}

// resolve checks t's keys against its kind and reads its secrets.
func (t Target) resolve(lookup func(string) (string, bool)) (targets.Def, error) {
	d := targets.Def{Name: t.Name, Kind: t.Kind, Endpoint: t.Endpoint, Timeout: t.Timeout}
	opts, ok := kindOptions[t.Kind]
	if !ok {
		return d, fmt.Errorf("target %q: unknown kind %q (known: %s)", t.Name, t.Kind, strings.Join(targets.KindNames(), ", "))
	}
	where := fmt.Sprintf("target %q (%s)", t.Name, t.Kind)
	switch {
	case t.Kind == "slack" && t.Endpoint != "":
		return d, fmt.Errorf("%s: a Slack hook URL is a secret: name its environment variable in options.webhook_url_env instead of writing endpoint", where)
	case !targets.IsHTTP(t.Kind) && t.Endpoint != "":
		return d, fmt.Errorf("%s: endpoint does not apply to this kind", where)
	case !targets.IsHTTP(t.Kind) && t.Timeout != 0:
		return d, fmt.Errorf("%s: timeout does not apply to this kind", where)
	case endpointRequired[t.Kind] && t.Endpoint == "":
		return d, fmt.Errorf("%s: endpoint is required", where)
	case t.Timeout < 0:
		return d, fmt.Errorf("%s: timeout %v is negative", where, t.Timeout)
	case !targets.IsHTTP(t.Kind) && t.RateLimit != nil:
		return d, fmt.Errorf("%s: line %d: rate_limit does not apply to this kind", where, t.RateLimit.Line)
	}
	if t.RateLimit != nil {
		rl, err := t.RateLimit.limit()
		if err != nil {
			return d, fmt.Errorf("%s: line %d: rate_limit: %w", where, t.RateLimit.Line, err)
		}
		d.RateLimit = rl
	}
	names := make([]string, len(opts))
	for i, o := range opts {
		names[i] = o.name
	}
	for _, k := range slices.Sorted(maps.Keys(t.Options)) {
		if !slices.Contains(names, k) {
			return d, fmt.Errorf("%s: unknown option %q (known: %s)", where, k, strings.Join(names, ", "))
		}
	}
	for _, o := range opts {
		v, set := t.Options[o.name]
		v = strings.TrimSpace(v)
		if !set || v == "" {
			if o.required {
				return d, fmt.Errorf("%s: options.%s is required", where, o.name)
			}
			continue
		}
		if o.parse != nil {
			if err := o.parse(&d, v); err != nil {
				return d, fmt.Errorf("%s: options.%s: %w", where, o.name, err)
			}
			continue
		}
		if !o.env() {
			o.set(&d, v)
			continue
		}
		// Checked by both processes (mcp-front reads no secrets).
		if err := checkEnvName(v); err != nil {
			return d, fmt.Errorf("%s: options.%s must name an environment variable: %w; if the value is the secret itself, "+
				"put the secret in an environment variable, name that variable here, and rotate the secret", where, o.name, err)
		}
		if lookup == nil {
			continue // shape only: the caller delivers nothing
		}
		secret, ok := lookup(v)
		if !ok {
			return d, fmt.Errorf("%s: environment variable %s (options.%s) is not set", where, shownEnvName(v), o.name)
		}
		if strings.TrimSpace(secret) == "" {
			return d, fmt.Errorf("%s: environment variable %s (options.%s) is empty", where, shownEnvName(v), o.name)
		}
		o.secret(&d, downstream.NewSecret(strings.TrimSpace(secret)))
	}
	return d, nil
}
