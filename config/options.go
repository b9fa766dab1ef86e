package config

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/jira"
	"ticketrelay/delivery/targets"
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
	"zendesk": {optEmail, optTokenEnv,
		{name: "public_comments", parse: func(d *targets.Def, v string) (err error) { d.PublicComments, err = boolean(v); return err }},
	},
	"pagerduty": {
		{name: "routing_key_env", required: true, secret: func(d *targets.Def, s downstream.Secret) { d.RoutingKey = s }},
		{name: "source", set: func(d *targets.Def, v string) { d.Source = v }},
		// Optional: a REST API key, so that a late resend looks the incident
		// up instead of paging again after the alert was resolved.
		{name: "api_token_env", secret: func(d *targets.Def, s downstream.Secret) { d.APIToken = s }},
		{name: "api_endpoint", set: func(d *targets.Def, v string) { d.APIEndpoint = v }},
		// Notes and updates: the REST API, as this user.
		{name: "from", set: func(d *targets.Def, v string) { d.From = v }},
		{name: "web_url", set: func(d *targets.Def, v string) { d.WebURL = v }},
		{name: "priority_ids", parse: func(d *targets.Def, v string) (err error) { d.PriorityRefs, err = priorityPairs(v); return err }},
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
		{name: "priority_names", parse: func(d *targets.Def, v string) (err error) { d.PriorityRefs, err = priorityPairs(v); return err }},
		{name: "fields", parse: func(d *targets.Def, v string) (err error) { d.Fields, err = jira.ParseFields(v); return err }},
	},
	"redmine": {
		{name: "api_key_env", required: true, secret: func(d *targets.Def, s downstream.Secret) { d.Token = s }},
		{name: "project", required: true, set: func(d *targets.Def, v string) { d.Project = v }},
		{name: "tracker_id", parse: func(d *targets.Def, v string) (err error) { d.TrackerID, err = positive(v); return err }},
		{name: "custom_field_id", parse: func(d *targets.Def, v string) (err error) { d.CustomFieldID, err = positive(v); return err }},
		{name: "priority_ids", parse: func(d *targets.Def, v string) (err error) { d.PriorityIDs, err = priorityIDs(v); return err }},
		{name: "open_status_id", parse: func(d *targets.Def, v string) (err error) { d.OpenStatusID, err = positive(v); return err }},
		{name: "closed_status_id", parse: func(d *targets.Def, v string) (err error) { d.ClosedStatusID, err = positive(v); return err }},
	},
	"slack": {
		{name: "webhook_url_env", required: true, secret: func(d *targets.Def, s downstream.Secret) { d.WebhookURL = s }},
		// Thread replies: the Web API with a bot token.
		{name: "bot_token_env", secret: func(d *targets.Def, s downstream.Secret) { d.BotToken = s }},
		{name: "channel", set: func(d *targets.Def, v string) { d.Channel = v }},
		{name: "api_endpoint", set: func(d *targets.Def, v string) { d.APIEndpoint = v }},
		{name: "workspace_url", set: func(d *targets.Def, v string) { d.WebURL = v }},
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
	pairs, err := priorityPairs(v)
	if err != nil {
		return nil, err
	}
	m := map[string]int{}
	for _, name := range slices.Sorted(maps.Keys(pairs)) {
		n, err := positive(pairs[name])
		if err != nil {
			return nil, fmt.Errorf("priority %s: %w", name, err)
		}
		m[name] = n
	}
	return m, nil
}

// priorityPairs parses "low=Low, urgent=Highest": ticket priorities to the
// downstream's names or ids.
func priorityPairs(v string) (map[string]string, error) {
	m := map[string]string{}
	for item := range strings.SplitSeq(v, ",") {
		name, ref, ok := strings.Cut(strings.TrimSpace(item), "=")
		name, ref = strings.TrimSpace(name), strings.TrimSpace(ref)
		if !ok || !slices.Contains(ticket.Priorities, name) || ref == "" {
			return nil, fmt.Errorf("%q: want priority=id pairs separated by commas, priorities among %s", item, strings.Join(ticket.Priorities, ", "))
		}
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf("priority %q is mapped twice", name)
		}
		m[name] = ref
	}
	return m, nil
}

// boolean parses true or false.
func boolean(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%q is not true or false", v)
	}
	return b, nil
}

// resolve checks t's keys against its kind and reads its secrets,
// adding every problem to ps. What targets.Def.ValidateShape checks (the
// name, the kind's existence, the endpoint's form, a negative timeout) is
// left to it.
func (t Target) resolve(lookup func(string) (string, bool), at itemSpots, ps *problems) targets.Def {
	d := targets.Def{Name: t.Name, Kind: t.Kind, Endpoint: t.Endpoint, Timeout: t.Timeout}
	opts, ok := kindOptions[t.Kind]
	if !ok {
		return d // an unknown kind: ValidateShape says so
	}
	where := fmt.Sprintf("target %q (%s)", t.Name, t.Kind)
	switch {
	case t.Kind == "slack" && t.Endpoint != "":
		ps.add(at.key("endpoint"), "%s: a Slack hook URL is a secret: name its environment variable in options.webhook_url_env instead of writing endpoint", where)
	case !targets.IsHTTP(t.Kind) && t.Endpoint != "":
		ps.add(at.key("endpoint"), "%s: endpoint does not apply to this kind", where)
	case endpointRequired[t.Kind] && t.Endpoint == "":
		ps.add(at.line, "%s: endpoint is required", where)
	}
	if !targets.IsHTTP(t.Kind) && t.Timeout != 0 {
		ps.add(at.key("timeout"), "%s: timeout does not apply to this kind", where)
	}
	if t.RateLimit != nil {
		if !targets.IsHTTP(t.Kind) {
			ps.add(t.RateLimit.Line, "%s: rate_limit does not apply to this kind", where)
		} else if t.RateLimit.bad {
			// Reported where it was read.
		} else if rl, err := t.RateLimit.limit(); err != nil {
			ps.add(t.RateLimit.Line, "%s: rate_limit: %v", where, err)
		} else {
			d.RateLimit = rl
		}
	}
	if mode, err := downstream.ParseCallerMode(strings.TrimSpace(t.Caller)); err != nil {
		ps.add(at.key("caller"), "%s: %v", where, err)
	} else {
		d.Caller = mode
	}
	meant := t.unknownOptions(opts, where, at, ps)
	for _, o := range opts {
		t.resolveOption(&d, o, meant[o.name], lookup, where, at, ps)
	}
	return d
}

// unknownOptions reports the options t names that its kind does not take,
// and returns the known options they look like misspellings of.
func (t Target) unknownOptions(opts []option, where string, at itemSpots, ps *problems) map[string]bool {
	names := make([]string, len(opts))
	for i, o := range opts {
		names[i] = o.name
	}
	// A misspelled option is one mistake: reported as unknown, with the
	// option it resembles, and that option is not also reported missing.
	meant := map[string]bool{}
	for _, k := range slices.Sorted(maps.Keys(t.Options)) {
		if slices.Contains(names, k) {
			continue
		}
		msg := fmt.Sprintf("%s: unknown option %q (known: %s)", where, k, strings.Join(names, ", "))
		if near := closest(k, names); near != "" {
			if _, set := t.Options[near]; !set {
				meant[near] = true
				msg += fmt.Sprintf("; did you mean %q?", near)
			}
		}
		ps.add(at.key("options."+k), "%s", msg)
	}
	return meant
}

// resolveOption sets option o of d from t's value: parsed, copied, or,
// for an option that names an environment variable, read from lookup (nil:
// the shape only, no secrets). A missing required option is reported
// unless a misspelling of it was (meant).
func (t Target) resolveOption(d *targets.Def, o option, meant bool, lookup func(string) (string, bool), where string, at itemSpots, ps *problems) {
	line := at.key("options." + o.name)
	v, set := t.Options[o.name]
	v = strings.TrimSpace(v)
	switch {
	case !set || v == "":
		if o.required && !meant {
			ps.add(at.key("options"), "%s: options.%s is required", where, o.name)
		}
		return
	case o.parse != nil:
		if err := o.parse(d, v); err != nil {
			ps.add(line, "%s: options.%s: %v", where, o.name, err)
		}
		return
	case !o.env():
		o.set(d, v)
		return
	}
	// Checked by both processes (mcp-front reads no secrets).
	if err := checkEnvName(v); err != nil {
		ps.add(line, "%s: options.%s must name an environment variable: %v; if the value is the secret itself, "+
			"put the secret in an environment variable, name that variable here, and rotate the secret", where, o.name, err)
		return
	}
	if lookup == nil {
		return // shape only: the caller delivers nothing
	}
	secret, ok := lookup(v)
	problem := ""
	switch {
	case !ok:
		problem = "is not set"
	case strings.TrimSpace(secret) == "":
		problem = "is empty"
	default:
		o.secret(d, downstream.NewSecret(strings.TrimSpace(secret)))
		return
	}
	msg := fmt.Sprintf("%s: environment variable %s (options.%s) %s", where, shownEnvName(v), o.name, problem)
	if !o.required {
		// Written, an optional secret is required: see decision 0055.
		msg += "; the option is optional, but once written its variable must be set (or remove the line)"
	}
	ps.add(line, "%s", msg)
}
