package config_test

import (
	"strings"
	"testing"

	"ticketrelay/config"
)

// A secret written where the name of its environment variable belongs is
// refused by both processes (the dispatcher reads the environment,
// mcp-front does not), and the error names the option without showing the
// value.
func TestEnvOptionMustNameAVariable(t *testing.T) {
	for _, c := range []struct {
		name, option, value, leak string
	}{
		{"github token", "token_env", "ghp_R8x2QkVw7LmN0pZ4SECRETaa11bb22cc33dd", "R8x2QkVw7LmN0pZ4"},
		{"fine-grained github token", "token_env", "github_pat_11AAAAAA0SECRET_xyz", "11AAAAAA0SECRET"},
		{"slack hook url", "webhook_url_env", "https://hooks.slack.example/services/T0/B0/SECRETHOOK", "SECRETHOOK"},
		{"hyphenated token", "token_env", "xoxb-1234-SECRETTOKEN", "SECRETTOKEN"},
		{"hex routing key", "routing_key_env", "0123456789abcdefSECRET0123456789", "0123456789abcdef"},
		{"a space inside", "api_key_env", "REDMINE KEYSECRET", "KEYSECRET"},
	} {
		yaml := map[string]string{
			"token_env":       "targets:\n  - {name: gh, kind: github, options: {owner: o, repo: r, token_env: '%s'}}\n",
			"webhook_url_env": "targets:\n  - {name: s, kind: slack, options: {webhook_url_env: '%s'}}\n",
			"routing_key_env": "targets:\n  - {name: p, kind: pagerduty, options: {routing_key_env: '%s'}}\n",
			"api_key_env":     "targets:\n  - {name: r, kind: redmine, endpoint: 'https://r.example', options: {api_key_env: '%s', project: p}}\n",
		}[c.option]
		y := strings.Replace(yaml, "%s", c.value, 1)
		for _, proc := range []struct {
			name   string
			lookup func(string) (string, bool)
		}{
			{"dispatcher", env("GITHUB_TOKEN", "x")},
			{"mcp-front", nil},
		} {
			t.Run(c.name+"/"+proc.name, func(t *testing.T) {
				_, err := config.Parse([]byte(y), proc.lookup)
				if err == nil {
					t.Fatalf("options.%s: %q accepted", c.option, c.value)
				}
				msg := err.Error()
				if !strings.Contains(msg, "options."+c.option) || !strings.Contains(msg, "must name an environment variable") {
					t.Errorf("the error does not name options.%s: %s", c.option, msg)
				}
				if strings.Contains(msg, c.leak) {
					t.Errorf("the error shows the value: %s", msg)
				}
			})
		}
	}
}

// Names of variables still work, and one that is unset is named in the
// error only in the conventional upper-case form: a lower-case "name" may
// be a secret that happens to look like one.
func TestEnvOptionNames(t *testing.T) {
	const y = "targets:\n  - {name: gh, kind: github, options: {owner: o, repo: r, token_env: '%s'}}\n"
	for _, name := range []string{"GITHUB_TOKEN", "_gh_token_2", "Gh_Token"} {
		if _, err := config.Parse([]byte(strings.Replace(y, "%s", name, 1)), env(name, "ghp_value")); err != nil {
			t.Errorf("token_env: %s: %v", name, err)
		}
		if _, err := config.Parse([]byte(strings.Replace(y, "%s", name, 1)), nil); err != nil {
			t.Errorf("token_env: %s, without secrets: %v", name, err)
		}
	}
	_, err := config.Parse([]byte(strings.Replace(y, "%s", "GH_TOKEN", 1)), env())
	if err == nil || !strings.Contains(err.Error(), "environment variable GH_TOKEN (options.token_env) is not set") {
		t.Errorf("unset upper-case name: %v", err)
	}
	_, err = config.Parse([]byte(strings.Replace(y, "%s", "mysecretvalue42", 1)), env())
	if err == nil || strings.Contains(err.Error(), "mysecretvalue42") || !strings.Contains(err.Error(), "options.token_env) is not set") {
		t.Errorf("unset lower-case name: %v", err)
	}
}
