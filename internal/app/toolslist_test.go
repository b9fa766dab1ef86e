package app_test

import (
	"context"
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/internal/app/front"
	"ticketrelay/internal/flagenv"
	"ticketrelay/testkit/e2eproc"
)

// allKinds has one target of every kind and one tool bound to each. Every
// endpoint is a loopback address: nothing may contact it.
const allKinds = `key_namespace: apptest
targets:
  - name: queue
    kind: local
  - name: hook
    kind: webhook
    endpoint: http://127.0.0.1:9/hooks/tickets
    options: {signing_secret_env: T_HOOK_SECRET, token_env: T_HOOK_TOKEN}
  - name: support
    kind: zendesk
    endpoint: http://127.0.0.1:9
    options: {email: bot@acme.test, token_env: T_ZENDESK_TOKEN}
  - name: oncall
    kind: pagerduty
    endpoint: http://127.0.0.1:9
    options: {routing_key_env: T_PAGERDUTY_KEY}
  - name: bugs
    kind: github
    endpoint: http://127.0.0.1:9
    options: {owner: acme, repo: support, token_env: T_GITHUB_TOKEN}
  - name: ops-jira
    kind: jira
    endpoint: http://127.0.0.1:9
    options: {email: bot@acme.test, token_env: T_JIRA_TOKEN, project: OPS}
  - name: alerts
    kind: slack
    options: {webhook_url_env: T_SLACK_URL}
  - name: legacy-hook
    kind: webhook
    endpoint: http://127.0.0.1:9/legacy
    options: {receiver_dedupes: false}
tools:
  - {name: file_local, target: queue, description: File a ticket in the local queue.}
  - {name: send_hook, target: hook}
  - {name: open_support_ticket, target: support}
  - {name: page_oncall, target: oncall}
  - {name: file_bug, target: bugs}
  - {name: open_ops_issue, target: ops-jira}
  - {name: notify_ops, target: alerts}
  - {name: send_legacy_hook, target: legacy-hook}
`

// secretVars are the variables allKinds names for secrets.
var secretVars = []string{"T_HOOK_SECRET", "T_HOOK_TOKEN", "T_ZENDESK_TOKEN", "T_PAGERDUTY_KEY", "T_GITHUB_TOKEN", "T_JIRA_TOKEN", "T_SLACK_URL"}

// idempotentTools are bound to targets with a dedupe key; the other create
// tools are bound to targets without one.
var (
	idempotentTools    = []string{"file_local", "send_hook", "open_support_ticket", "page_oncall"}
	nonIdempotentTools = []string{"file_bug", "open_ops_issue", "notify_ops", "send_legacy_hook"}
)

func startFront(t *testing.T, env *fakeEnv, args ...string) (*running, string) {
	t.Helper()
	r := start(t, front.Run, env, append([]string{"-listen", "127.0.0.1:0", "-metrics-listen", "",
		"-create-db", "-db", filepath.Join(t.TempDir(), "tickets.db")}, args...)...)
	return r, "http://" + r.addrs["mcp"] + "/mcp"
}

func TestToolsListAnnotationsPerKind(t *testing.T) {
	cfg := writeFile(t, "ticketrelay.yaml", allKinds)
	env := newEnv() // no secrets, nothing at all
	front, url := startFront(t, env, "-config", cfg)
	if _, ok := front.addrs["metrics"]; ok {
		t.Fatalf("-metrics-listen \"\" should turn metrics off, yet addrs = %v", front.addrs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "app-test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		tools[tl.Name] = tl
	}
	// find_request, search_tickets, add_comment and update_ticket beside the create tools.
	if want := len(idempotentTools) + len(nonIdempotentTools) + 4; len(tools) != want {
		t.Fatalf("tools/list has %d tools (%v), want %d", len(tools), slices.Sorted(maps.Keys(tools)), want)
	}
	for _, name := range append(slices.Clone(idempotentTools), nonIdempotentTools...) {
		tl := tools[name]
		if tl == nil {
			t.Errorf("tool %s is missing", name)
			continue
		}
		a := tl.Annotations
		if a == nil {
			t.Errorf("%s: no annotations", name)
			continue
		}
		idem := slices.Contains(idempotentTools, name)
		if a.IdempotentHint != idem {
			t.Errorf("%s: idempotentHint %v, want %v", name, a.IdempotentHint, idem)
		}
		if a.DestructiveHint == nil || *a.DestructiveHint {
			t.Errorf("%s: destructiveHint %v, want an explicit false", name, a.DestructiveHint)
		}
		if a.OpenWorldHint == nil || !*a.OpenWorldHint {
			t.Errorf("%s: openWorldHint %v, want true", name, a.OpenWorldHint)
		}
		if a.ReadOnlyHint {
			t.Errorf("%s: readOnlyHint true on a create tool", name)
		}
		retryAdvice := strings.Contains(tl.Description, "do NOT retry") && strings.Contains(tl.Description, "first call find_request")
		if retryAdvice == idem {
			t.Errorf("%s (idempotent %v): description says to call find_request before a retry: %v; want %v\n%s",
				name, idem, retryAdvice, !idem, tl.Description)
		}
	}
	if d := tools["file_local"].Description; !strings.HasPrefix(d, "File a ticket in the local queue.") {
		t.Errorf("file_local: the configured description is not used: %q", d)
	}
	// Slack's comments are looked up eventually, and the legacy hook's
	// receiver takes no key: add_comment cannot be retried blindly. An
	// update sets values: repeating it changes nothing more.
	if a := tools["add_comment"].Annotations; a == nil || a.IdempotentHint || a.ReadOnlyHint {
		t.Errorf("add_comment annotations %+v: want not idempotent, not read-only", a)
	}
	if a := tools["update_ticket"].Annotations; a == nil || !a.IdempotentHint || a.ReadOnlyHint {
		t.Errorf("update_ticket annotations %+v: want idempotent, not read-only", a)
	}
	if fr := tools["find_request"]; fr == nil || fr.Annotations == nil || !fr.Annotations.ReadOnlyHint {
		t.Errorf("find_request must be readOnlyHint: %+v", fr)
	}

	// On the wire: destructiveHint false is present, not left to the
	// client's default (true); idempotentHint is absent where it is false.
	raw := rawToolsList(t, url)
	for _, name := range append(slices.Clone(idempotentTools), nonIdempotentTools...) {
		a, ok := raw[name]
		if !ok {
			t.Errorf("raw tools/list: no %s", name)
			continue
		}
		if v, ok := a["destructiveHint"]; !ok || v != false {
			t.Errorf("raw tools/list: %s annotations %v: want \"destructiveHint\": false on the wire", name, a)
		}
		if v, ok := a["openWorldHint"]; !ok || v != true {
			t.Errorf("raw tools/list: %s annotations %v: want \"openWorldHint\": true", name, a)
		}
		if v := a["idempotentHint"]; slices.Contains(nonIdempotentTools, name) && v == true ||
			slices.Contains(idempotentTools, name) && v != true {
			t.Errorf("raw tools/list: %s idempotentHint %v", name, v)
		}
	}
	if a := raw["find_request"]; a["readOnlyHint"] != true {
		t.Errorf("raw tools/list: find_request annotations %v: want readOnlyHint true", a)
	}

	// The front never asked for a secret: it read only its own flags' twins
	// and OpenTelemetry's standard variables (tracing).
	for _, k := range env.Asked() {
		if !strings.HasPrefix(k, flagenv.Prefix) && !strings.HasPrefix(k, "OTEL_") || slices.Contains(secretVars, k) {
			t.Errorf("mcp-front looked up %s: it must need no downstream secret", k)
		}
	}
}

// rawToolsList runs initialize and tools/list by hand and returns each
// tool's annotations as decoded from the raw JSON.
func rawToolsList(t *testing.T, url string) map[string]map[string]any {
	t.Helper()
	raw := e2eproc.RawInitialize(t, url, "2025-06-18", "raw")
	msg := raw.Call(t, []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))
	var out struct {
		Result struct {
			Tools []struct {
				Name        string          `json:"name"`
				Annotations json.RawMessage `json:"annotations"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(msg, &out); err != nil {
		t.Fatalf("tools/list answer %s: %v", msg, err)
	}
	m := map[string]map[string]any{}
	for _, tl := range out.Result.Tools {
		var a map[string]any
		if err := json.Unmarshal(tl.Annotations, &a); err != nil {
			t.Fatalf("tool %s annotations %s: %v", tl.Name, tl.Annotations, err)
		}
		m[tl.Name] = a
	}
	return m
}
