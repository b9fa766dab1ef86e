package oauth_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// claudeEnv names the Claude Code CLI (make test-oauth installs it).
const claudeEnv = "TICKETRELAY_CLAUDE"

// TestClaudeCodeSeesSignIn: Claude Code, given only mcp-front's URL,
// reports the server as needing authentication (it followed the challenge
// to Hydra's metadata and found it can register and sign in), not as
// failed; with a static token header it connects as before.
func TestClaudeCodeSeesSignIn(t *testing.T) {
	bin := os.Getenv(claudeEnv)
	if bin == "" {
		t.Skip(claudeEnv + " is not set: this test needs the Claude Code CLI (make test-oauth installs it)")
	}
	listen := freeAddr(t)
	resource := "http://" + listen + "/mcp"
	h := startHydra(t, resource) // an issuer without client registration is "Failed to connect" to Claude Code
	startFront(t, listen, resource, h.issuer)

	home, project := t.TempDir(), t.TempDir()
	claude := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = project
		// Its own home, and nothing sent anywhere but mcp-front.
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
			"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("claude %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	claude("mcp", "add", "--transport", "http", "tickets", resource)
	claude("mcp", "add", "--transport", "http", "tickets-static", resource, "--header", "Authorization: Bearer static-token-0123456789abcdef")
	if out := claude("mcp", "get", "tickets"); !strings.Contains(out, "Needs authentication") {
		t.Errorf("claude mcp get, sign-in: want \"Needs authentication\":\n%s", out)
	}
	if out := claude("mcp", "get", "tickets-static"); !strings.Contains(out, "Connected") {
		t.Errorf("claude mcp get, static token: want \"Connected\":\n%s", out)
	}
}
