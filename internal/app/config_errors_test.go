package app_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
)

func TestConfigErrorsStopBothProcesses(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string // pieces of the one-line error
	}{
		{"unknown key", "targets:\n  - name: a\n    kind: local\n    colour: red\n", []string{`unknown key "colour"`, "line 4"}},
		{"unknown kind", "targets:\n  - name: a\n    kind: trello\n", []string{`target "a"`, `unknown kind "trello"`}},
		{"tool bound to a missing target", "targets:\n  - {name: a, kind: local}\ntools:\n  - {name: t, target: nope}\n",
			[]string{`tool "t"`, `target "nope"`, "not defined"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := writeFile(t, "bad.yaml", c.yaml)
			dir := t.TempDir()
			procs := map[string]struct {
				run  func(context.Context, app.Env) error
				args []string
			}{
				"mcp-front": {front.Run, []string{"-config", cfg, "-listen", "127.0.0.1:0", "-metrics-listen", "", "-db", filepath.Join(dir, "f.db")}},
				"dispatcher": {dispatcher.Run, []string{"-config", cfg, "-data", dir, "-nats-listen", "127.0.0.1:0",
					"-metrics-listen", ""}},
			}
			for name, p := range procs {
				_, _, err := runOnce(t, p.run, newEnv(), p.args...)
				if err == nil {
					t.Fatalf("%s started with a bad config", name)
				}
				checkOneLine(t, name, err, append([]string{cfg}, c.want...)...)
				if errors.Is(err, app.ErrUsage) {
					t.Errorf("%s: a config error is not a usage error: %v", name, err)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "f.db")); err == nil {
				t.Error("mcp-front created its database before checking the config")
			}
		})
	}

	t.Run("missing secret", func(t *testing.T) {
		cfg := writeFile(t, "ticketrelay.yaml", allKinds)
		env := newEnv("T_HOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "T_HOOK_TOKEN", "tok",
			"T_ZENDESK_TOKEN", "zd", "T_PAGERDUTY_KEY", "0123456789abcdef0123456789abcdef",
			"T_GITHUB_TOKEN", "gh", "T_SLACK_URL", "http://127.0.0.1:9/services/T/B/x") // no T_JIRA_TOKEN
		dir := t.TempDir()
		_, _, err := runOnce(t, dispatcher.Run, env, "-config", cfg, "-data", dir, "-nats-listen", "127.0.0.1:0", "-metrics-listen", "")
		if err == nil {
			t.Fatal("the dispatcher started without T_JIRA_TOKEN")
		}
		checkOneLine(t, "dispatcher", err, "T_JIRA_TOKEN", "is not set", `target "ops-jira"`)
		// The same file is fine for mcp-front, which reads no secret.
		startFront(t, newEnv(), "-config", cfg)
	})
}

func checkOneLine(t *testing.T, who string, err error, want ...string) {
	t.Helper()
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("%s: the error is not one line: %q", who, msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: error %q does not name %q", who, msg, w)
		}
	}
}
