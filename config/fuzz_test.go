package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"ticketrelay/config"
)

// fuzzSecrets are valid values for the environment variables the seeds
// name; any other name reads the fuzzed value, and UNSET reads nothing.
var fuzzSecrets = map[string]string{
	"OPS_HOOK_SECRET":       "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	"OPS_HOOK_TOKEN":        "hook-token-FUZZSECRET1",
	"ZENDESK_TOKEN":         "zendesk-FUZZSECRET2",
	"PAGERDUTY_ROUTING_KEY": "0123456789abcdef0123456789abcdef",
	"GITHUB_TOKEN":          "ghp_FUZZSECRET3",
	"JIRA_TOKEN":            "jira-FUZZSECRET4",
	"SLACK_WEBHOOK_URL":     "https://hooks.slack.example/services/T0/B0/FUZZSECRET5",
	"REDMINE_API_KEY":       "redmine-FUZZSECRET6",
}

// FuzzParse checks config.Parse on arbitrary files and secrets: it never
// panics; an error lists problems of one line each and echoes no secret; an accepted file is
// also accepted for its shape alone (mcp-front's nil lookup), and it
// round-trips: written back as YAML it parses again to the same targets,
// tools and key namespace.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("..", "examples", "ticketrelay.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example, "")
	f.Add([]byte(""), "")
	f.Add([]byte("targets: []\n"), "")
	f.Add([]byte("key_namespace: a b\n"), "")
	f.Add([]byte("targets:\n  - {name: hook, kind: webhook, endpoint: 'http://127.0.0.1:1/x', timeout: 1m30s, options: {token_env: T}}\n"), "token-value-0001")
	f.Add([]byte("targets:\n  - {name: hook, kind: webhook, endpoint: 'http://h/x', options: {signing_secret_env: S}}\n"), "whsec_bm90IGJhc2U2NA")
	f.Add([]byte("targets:\n  - {name: p, kind: pagerduty, options: {routing_key_env: K}}\ntools:\n  - {name: page, target: p}\n"), "short-key")
	f.Add([]byte("targets:\n  - {name: s, kind: slack, options: {webhook_url_env: UNSET}}\n"), "")
	f.Add([]byte("targets:\n  - {name: j, kind: jira, endpoint: 'https://x', timeout: -1s, options: {email: e, token_env: T, project: P}}\n"), "t")
	f.Add([]byte("targets:\n  - {name: r, kind: redmine, endpoint: 'https://r', options: {api_key_env: K, project: p, tracker_id: 2, priority_ids: 'low=1,urgent=4'}}\n"), "k")
	f.Add([]byte("tools:\n  - name: find_request\n    target: local\n"), "")
	f.Add([]byte("targets:\n  - name: a\n    kind: local\n  - name: a\n    kind: local\n"), "")
	f.Add([]byte("targets:\n  - {name: l, kind: local, options: {path: /tmp/x.jsonl}, surprise: 1}\n"), "")
	f.Add([]byte("targets: {name: x}\n"), "")
	f.Add([]byte("\t- not: [valid\n"), "")
	f.Add([]byte("&a [*a]"), "")
	f.Add([]byte("0\r\r0"), "") // a scalar with line breaks, quoted in the error
	f.Fuzz(func(t *testing.T, file []byte, secret string) {
		lookup := func(name string) (string, bool) {
			if v, ok := fuzzSecrets[name]; ok {
				return v, true
			}
			return secret, name != "UNSET"
		}
		cfg, err := config.Parse(file, lookup)
		if err != nil {
			msg := err.Error()
			var ce *config.Error
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("error %q: not a *config.Error with problems", msg)
			}
			for _, p := range ce.Problems {
				if strings.ContainsAny(p.String(), "\r\n") {
					t.Fatalf("a problem of more than one line: %q", p)
				}
			}
			for _, s := range append(secretsOf(fuzzSecrets), secret) {
				if len(s) >= 8 && !strings.Contains(string(file), s) && strings.Contains(msg, s) {
					t.Fatalf("error echoes the secret %q: %s", s, msg)
				}
			}
			return
		}
		if _, err := config.Parse(file, nil); err != nil {
			t.Fatalf("accepted with its secrets, refused for its shape alone: %v", err)
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal an accepted config: %v", err)
		}
		again, err := config.Parse(out, lookup)
		if err != nil {
			t.Fatalf("an accepted config written back is refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(again.Defs(), cfg.Defs()) || !reflect.DeepEqual(again.Tools, cfg.Tools) || again.KeyNamespace != cfg.KeyNamespace {
			t.Fatalf("round trip changed the config:\n%+v\n%+v\nvia\n%s", cfg, again, out)
		}
	})
}

func secretsOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
