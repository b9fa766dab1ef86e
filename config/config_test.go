package config_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/config"
	"ticketrelay/delivery/targets"
)

// env is a fake environment: tests never touch the process's.
func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// exampleEnv holds every secret examples/ticketrelay.yaml names.
var exampleEnv = env(
	"OPS_HOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	"OPS_HOOK_TOKEN", "hook-token-SECRET1",
	"ZENDESK_TOKEN", "zendesk-SECRET2",
	"PAGERDUTY_ROUTING_KEY", "0123456789abcdef0123456789abcdef",
	"GITHUB_TOKEN", "ghp_SECRET3",
	"JIRA_TOKEN", "jira-SECRET4",
	"SLACK_WEBHOOK_URL", "https://hooks.slack.example/services/T0/B0/SECRET5",
	"REDMINE_API_KEY", "redmine-SECRET6",
)

var secretValues = []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "SECRET1", "SECRET2", "0123456789abcdef", "SECRET3", "SECRET4", "SECRET5", "SECRET6"}

func TestZeroConfig(t *testing.T) {
	f, err := config.Load("", exampleEnv)
	if err != nil {
		t.Fatal(err)
	}
	defs := f.Defs()
	if len(defs) != 1 || defs[0].Name != targets.DefaultName || defs[0].Kind != "local" {
		t.Fatalf("zero config targets: %+v; want one local target", defs)
	}
	if len(f.Tools) != 1 || f.Tools[0].Name != config.DefaultTool || f.Tools[0].Target != targets.DefaultName {
		t.Fatalf("zero config tools: %+v; want create_ticket bound to local", f.Tools)
	}
	// An empty file is the zero config too.
	g, err := config.Parse(nil, nil)
	if err != nil || len(g.Defs()) != 1 || g.Tools[0].Name != config.DefaultTool {
		t.Fatalf("empty file: %+v, %v", g, err)
	}
}

func TestExampleFile(t *testing.T) {
	f, err := config.Load(filepath.Join("..", "examples", "ticketrelay.yaml"), exampleEnv)
	if err != nil {
		t.Fatal(err)
	}
	if f.KeyNamespace != "acme-prod" {
		t.Fatalf("key_namespace %q", f.KeyNamespace)
	}
	byName := map[string]targets.Def{}
	for _, d := range f.Defs() {
		byName[d.Name] = d
	}
	if len(byName) != 8 || len(f.Tools) != 8 {
		t.Fatalf("%d targets, %d tools; want 8 and 8", len(byName), len(f.Tools))
	}
	kinds := map[string]bool{}
	for _, d := range byName {
		kinds[d.Kind] = true
	}
	for _, k := range targets.KindNames() {
		if !kinds[k] {
			t.Errorf("the example has no %s target", k)
		}
	}
	zd := byName["support"]
	if zd.Endpoint != "https://acme.zendesk.com" || zd.Email != "ticketrelay@acme.example" || zd.Token.Reveal() != "zendesk-SECRET2" {
		t.Fatalf("support: %+v", zd)
	}
	if h := byName["ops-hook"]; h.Timeout != 10*time.Second || h.SigningSecret.IsZero() || h.Token.Reveal() != "hook-token-SECRET1" {
		t.Fatalf("ops-hook: %+v", h)
	}
	if g := byName["bugs"]; g.Owner != "acme" || g.Repo != "support" || g.Token.Reveal() != "ghp_SECRET3" {
		t.Fatalf("bugs: %+v", g)
	}
	if j := byName["ops-jira"]; j.Project != "OPS" || j.IssueType != "Task" {
		t.Fatalf("ops-jira: %+v", j)
	}
	if r := byName["tracker"]; r.Endpoint != "https://redmine.acme.example" || r.Project != "support" || r.TrackerID != 3 ||
		r.CustomFieldID != 5 || r.PriorityIDs["urgent"] != 4 || len(r.PriorityIDs) != 4 || r.Token.Reveal() != "redmine-SECRET6" {
		t.Fatalf("tracker: %+v", r)
	}
	if s := byName["alerts"]; !strings.HasSuffix(s.WebhookURL.Reveal(), "SECRET5") {
		t.Fatal("alerts: the hook URL was not read from the environment")
	}
	if p := byName["oncall"]; p.RoutingKey.Reveal() != "0123456789abcdef0123456789abcdef" || p.Source != "ticketrelay" {
		t.Fatalf("oncall: %+v", p)
	}
	if l := byName["local"]; l.Path != "data/tickets.jsonl" {
		t.Fatalf("local: %+v", l)
	}

	// Secrets never show, however the config is printed or logged.
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	log.Info("config", "file", f, "defs", f.Defs())
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "file", f, "defs", f.Defs())
	out := logs.String() + fmt.Sprintf("%v %+v %#v %v %+v", f, f, f, f.Defs(), f.Defs())
	for _, s := range secretValues {
		if strings.Contains(out, s) {
			t.Fatalf("a secret (%s) shows in printed config: %s", s, out)
		}
	}
}

func TestErrors(t *testing.T) {
	const zendesk = `
targets:
  - name: support
    kind: zendesk
    endpoint: https://acme.zendesk.com
    options: {email: a@b.c, token_env: ZD}
`
	cases := []struct {
		name, yaml string
		env        func(string) (string, bool)
		want       string
	}{
		{"unknown top-level key", "target: []\n", nil, `line 1: unknown key "target" at the top level`},
		{"unknown target key", "targets:\n  - name: a\n    kind: local\n    path: x\n", nil, `line 4: target "a" (local): unknown key "path" (known: name, kind, endpoint, timeout, rate_limit, options); path is an option of kind local: indent it under options:`},
		{"unknown tool key", "tools:\n  - name: a\n    target: local\n    idempotent: true\n", nil, `line 4: tool "a": unknown key "idempotent"`},
		{"unknown option", strings.Replace(zendesk, "token_env", "tokn_env", 1), env("ZD", "x"), `target "support" (zendesk): unknown option "tokn_env"`},
		{"missing env var", zendesk, env(), `environment variable ZD (options.token_env) is not set`},
		{"empty env var", zendesk, env("ZD", " "), `environment variable ZD (options.token_env) is empty`},
		{"unknown kind", "targets:\n  - name: a\n    kind: trello\n", nil, `target "a": unknown kind "trello"`},
		{"receiver_dedupes not a boolean", "targets:\n  - name: w\n    kind: webhook\n    endpoint: https://x.example/hook\n    options: {receiver_dedupes: sometimes}\n", nil,
			`target "w" (webhook): options.receiver_dedupes: "sometimes" is not true or false`},
		{"tool bound to a missing target", zendesk + "tools:\n  - name: t\n    target: nope\n", env("ZD", "x"),
			`tool "t" is bound to target "nope", which is not defined`},
		{"missing required option", strings.Replace(zendesk, "email: a@b.c, ", "", 1), env("ZD", "x"), `target "support" (zendesk): options.email is required`},
		{"missing endpoint", strings.Replace(zendesk, "endpoint: https://acme.zendesk.com", "timeout: 5s", 1), env("ZD", "x"),
			`target "support" (zendesk): endpoint is required`},
		{"slack endpoint", "targets:\n  - name: s\n    kind: slack\n    endpoint: https://hooks.slack.com/services/x\n", nil,
			"a Slack hook URL is a secret"},
		{"endpoint on local", "targets:\n  - name: l\n    kind: local\n    endpoint: http://x\n", nil, `target "l" (local): endpoint does not apply`},
		// Read without secrets, as mcp-front does: the endpoint's form
		// needs none, so the front refuses what the dispatcher would.
		{"endpoint without a scheme, without secrets", "targets:\n  - {name: w, kind: webhook, endpoint: hooks.example.com/tickets}\n", nil,
			`target "w" (webhook): endpoint is not an http(s) URL with a host`},
		{"ftp endpoint, without secrets", "targets:\n  - {name: w, kind: webhook, endpoint: 'ftp://hooks.example.com/t'}\n", nil, `endpoint is not an http(s) URL`},
		{"second document", "targets:\n  - {name: a, kind: local}\n---\ntargets:\n  - {name: b, kind: trello}\n", nil,
			"line 3: a second YAML document"},
		{"bad endpoint", strings.Replace(zendesk, "https://acme.zendesk.com", "acme.zendesk.com", 1), env("ZD", "x"), `is not an http(s) URL`},
		{"bad signing secret", "targets:\n  - name: h\n    kind: webhook\n    endpoint: https://x\n    options: {signing_secret_env: S}\n",
			env("S", "not-whsec"), `signing secret: must start with "whsec_"`},
		{"bad timeout", "targets:\n  - name: h\n    kind: webhook\n    endpoint: https://x\n    timeout: soon\n", nil, `line 5: target "h" (webhook): timeout: "soon" is not a duration`},
		{"duplicate target", "targets:\n  - {name: a, kind: local}\n  - {name: a, kind: local}\n", nil, `target "a" is defined twice`},
		{"bad target name", "targets:\n  - {name: A B, kind: local}\n", nil, `target name "A B"`},
		{"duplicate tool", "tools:\n  - {name: t, target: local}\n  - {name: t, target: local}\n", nil, `tool "t" is defined twice`},
		{"find_request is taken", "tools:\n  - {name: find_request, target: local}\n", nil, `tool "find_request" is defined twice`},
		{"search_tickets is taken", "tools:\n  - {name: search_tickets, target: local}\n", nil, `tool "search_tickets" is defined twice`},
		{"bad search scope", "search_scope: team\n", nil, `line 1: search_scope "team": use "targets"`},
		{"no tools for two targets", "targets:\n  - {name: a, kind: local}\n  - {name: b, kind: local, options: {path: b.jsonl}}\n", nil, "no tools"},
		{"bad namespace", "key_namespace: has space\n", nil, "key_namespace"},
		{"redmine without endpoint", "targets:\n  - {name: r, kind: redmine, options: {api_key_env: K, project: p}}\n", env("K", "x"),
			`target "r" (redmine): endpoint is required`},
		{"redmine without project", "targets:\n  - {name: r, kind: redmine, endpoint: 'https://r', options: {api_key_env: K}}\n", env("K", "x"),
			`options.project is required`},
		{"redmine bad tracker id", "targets:\n  - {name: r, kind: redmine, endpoint: 'https://r', options: {api_key_env: K, project: p, tracker_id: bug}}\n",
			env("K", "x"), `options.tracker_id: "bug" is not a positive integer`},
		{"redmine zero custom field", "targets:\n  - {name: r, kind: redmine, endpoint: 'https://r', options: {api_key_env: K, project: p, custom_field_id: 0}}\n",
			env("K", "x"), `options.custom_field_id: "0" is not a positive integer`},
		{"redmine unknown priority", "targets:\n  - {name: r, kind: redmine, endpoint: 'https://r', options: {api_key_env: K, project: p, priority_ids: 'low=1, blocker=5'}}\n",
			env("K", "x"), `options.priority_ids: " blocker=5": want priority=id pairs`},
		{"redmine twice mapped priority", "targets:\n  - {name: r, kind: redmine, endpoint: 'https://r', options: {api_key_env: K, project: p, priority_ids: 'low=1,low=2'}}\n",
			env("K", "x"), `priority "low" is mapped twice`},
		{"redmine bad priority id", "targets:\n  - {name: r, kind: redmine, endpoint: 'https://r', options: {api_key_env: K, project: p, priority_ids: 'high=x'}}\n",
			env("K", "x"), `priority high: "x" is not a positive integer`},
		{"pagerduty api endpoint without a key", "targets:\n  - {name: p, kind: pagerduty, options: {routing_key_env: K, api_endpoint: 'https://api.pd.example'}}\n",
			env("K", "x"), `a REST API endpoint without a REST API key`},
		{"pagerduty api key not set", "targets:\n  - {name: p, kind: pagerduty, options: {routing_key_env: K, api_token_env: PD_API}}\n",
			env("K", "x"), `environment variable PD_API (options.api_token_env) is not set`},
		{"pagerduty bad api endpoint", "targets:\n  - {name: p, kind: pagerduty, options: {routing_key_env: K, api_token_env: A, api_endpoint: api.pd.example}}\n",
			env("K", "x", "A", "y"), `is not an http(s) URL`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse([]byte(c.yaml), c.env)
			if err == nil {
				t.Fatalf("parsed without error; want %q", c.want)
			}
			if !hasProblem(t, err, c.want) {
				t.Fatalf("error %q: want a problem containing %q", err, c.want)
			}
		})
	}
}

// hasProblem reports whether err, a *config.Error whose every problem is
// one line, has a problem containing want.
func hasProblem(t *testing.T, err error, want string) bool {
	t.Helper()
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %q is not a *config.Error", err)
	}
	found := false
	for _, p := range ce.Problems {
		if strings.ContainsAny(p.String(), "\r\n") {
			t.Fatalf("a problem of more than one line: %q", p)
		}
		found = found || strings.Contains(p.String(), want)
	}
	return found
}

// The secret's value never appears in an error, even a wrong one.
func TestErrorsDoNotEchoSecrets(t *testing.T) {
	y := "targets:\n  - name: h\n    kind: webhook\n    endpoint: https://x\n    options: {signing_secret_env: S}\n"
	_, err := config.Parse([]byte(y), env("S", "whsec_!!notbase64-SECRETVALUE"))
	if err == nil || strings.Contains(err.Error(), "SECRETVALUE") {
		t.Fatalf("error %v", err)
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte("nope: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(p, nil)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `unknown key "nope"`) {
		t.Fatalf("Load: %v", err)
	}
	if _, err := config.Load(filepath.Join(t.TempDir(), "missing.yaml"), nil); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
}

// PagerDuty's optional REST API key: read from the environment, defaulting
// to the public REST host, never printed; absent, the target has none.
func TestPagerDutyAPIOptions(t *testing.T) {
	const y = `
targets:
  - name: oncall
    kind: pagerduty
    options: {routing_key_env: PD_KEY, api_token_env: PD_API_TOKEN%s}
tools:
  - {name: page, target: oncall}
`
	e := env("PD_KEY", "0123456789abcdef0123456789abcdef", "PD_API_TOKEN", "pd-rest-SECRETAPI")
	f, err := config.Parse(fmt.Appendf(nil, y, ""), e)
	if err != nil {
		t.Fatal(err)
	}
	d := f.Defs()[0]
	if d.APIToken.Reveal() != "pd-rest-SECRETAPI" || d.APIEndpoint != "" {
		t.Fatalf("api_token_env: %+v", d)
	}
	f, err = config.Parse(fmt.Appendf(nil, y, ", api_endpoint: 'https://api.eu.pagerduty.com'"), e)
	if err != nil {
		t.Fatal(err)
	}
	if d := f.Defs()[0]; d.APIEndpoint != "https://api.eu.pagerduty.com" || d.APIToken.IsZero() {
		t.Fatalf("api_endpoint: %+v", d)
	}
	// mcp-front reads the shape only: the key's variable need not be set.
	if _, err := config.Parse(fmt.Appendf(nil, y, ""), nil); err != nil {
		t.Fatalf("shape only: %v", err)
	}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "file", f, "defs", f.Defs())
	if out := logs.String() + fmt.Sprintf("%v %+v %#v %+v", f, f, f, f.Defs()); strings.Contains(out, "SECRETAPI") {
		t.Fatalf("the REST API key shows in printed config: %s", out)
	}
	// Without the option: no key, no lookups (the documented limit).
	f, err = config.Parse([]byte(strings.Replace(fmt.Sprintf(y, ""), ", api_token_env: PD_API_TOKEN", "", 1)), e)
	if err != nil {
		t.Fatal(err)
	}
	if d := f.Defs()[0]; !d.APIToken.IsZero() {
		t.Fatalf("no api_token_env, yet a key: %+v", d)
	}
}
