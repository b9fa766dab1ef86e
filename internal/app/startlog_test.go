package app_test

import (
	"fmt"
	"strings"
	"testing"

	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
)

// The first lines of both processes name the configuration file (or say
// there is none) and each target's name and kind, and nothing of a
// target's secrets or endpoint.
func TestStartupLogNamesTheConfiguration(t *testing.T) {
	secrets := []string{"T_HOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "T_HOOK_TOKEN", "hook-token-5u9x",
		"T_ZENDESK_TOKEN", "zendesk-token-k2p7", "T_PAGERDUTY_KEY", "0123456789abcdef0123456789abcdef",
		"T_GITHUB_TOKEN", "github-token-q8r1", "T_JIRA_TOKEN", "jira-token-w3e4", "T_SLACK_URL", "http://127.0.0.1:9/services/T/B/slack-secret"}
	cfg := writeFile(t, "ticketrelay.yaml", allKinds)
	targets := `targets="queue (local), hook (webhook), support (zendesk), oncall (pagerduty), bugs (github), ops-jira (jira), alerts (slack), legacy-hook (webhook)"`

	d := start(t, dispatcher.Run, newEnv(secrets...), dispatcherArgs(t.TempDir(), "-config", cfg)...)
	f, _ := startFront(t, newEnv(secrets...), "-config", cfg)
	for name, stderr := range map[string]string{"dispatcher": d.stderr.String(), "mcp-front": f.stderr.String()} {
		line := configLine(t, name, stderr)
		if want := fmt.Sprintf("config=%s %s", cfg, targets); !strings.Contains(line, want) {
			t.Errorf("%s: start-up line %q does not say %q", name, line, want)
		}
		for i := 1; i < len(secrets); i += 2 {
			if strings.Contains(stderr, secrets[i]) {
				t.Errorf("%s logs the secret of %s:\n%s", name, secrets[i-1], stderr)
			}
		}
		if strings.Contains(line, "127.0.0.1:9") {
			t.Errorf("%s: start-up line %q names an endpoint (a webhook URL may carry a secret)", name, line)
		}
	}
	if line := configLine(t, "mcp-front", f.stderr.String()); !strings.Contains(line, "tools=\"file_local->queue, send_hook->hook, ") {
		t.Errorf("mcp-front: start-up line %q does not list its tools and their targets", line)
	}

	// Without -config: the built-in local target.
	d = start(t, dispatcher.Run, newEnv(), dispatcherArgs(t.TempDir())...)
	f, _ = startFront(t, newEnv())
	for name, stderr := range map[string]string{"dispatcher": d.stderr.String(), "mcp-front": f.stderr.String()} {
		if line, want := configLine(t, name, stderr), fmt.Sprintf("config=%q targets=\"local (local)\"", app.NoConfig); !strings.Contains(line, want) {
			t.Errorf("%s without -config: start-up line %q does not say %q", name, line, want)
		}
	}
}

// configLine is the process's one "configuration" log line.
func configLine(t *testing.T, name, stderr string) string {
	t.Helper()
	var found []string
	for l := range strings.SplitSeq(stderr, "\n") {
		if strings.Contains(l, "msg=configuration ") {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s logged %d configuration lines, want 1:\n%s", name, len(found), stderr)
	}
	return found[0]
}
