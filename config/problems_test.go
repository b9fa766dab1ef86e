package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"ticketrelay/config"
)

// problemsOf parses y and returns its problems as text, one a problem.
func problemsOf(t *testing.T, y string, lookup func(string) (string, bool)) []string {
	t.Helper()
	_, err := config.Parse([]byte(y), lookup)
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Fatalf("Parse: %v; want a *config.Error", err)
	}
	out := make([]string, len(ce.Problems))
	for i, p := range ce.Problems {
		out[i] = p.String()
	}
	return out
}

// Started without any of its secrets, the example file names every missing
// variable in one run, each at the line of the option that names it.
func TestEveryMissingVariableInOneRun(t *testing.T) {
	path := filepath.Join("..", "examples", "ticketrelay.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	got := problemsOf(t, string(b), env())
	var want []string
	for i, l := range lines {
		// "      token_env: ZENDESK_TOKEN   # comment"
		m := regexp.MustCompile(`^\s+(\w+_env): ([A-Z_]+)`).FindStringSubmatch(l)
		if m == nil {
			continue
		}
		want = append(want, fmt.Sprintf("line %d: target %%q (%%s): environment variable %s (options.%s) is not set", i+1, m[2], m[1]))
	}
	if len(want) != 8 || len(got) != len(want) {
		t.Fatalf("%d _env options in the example, %d problems:\n%s", len(want), len(got), strings.Join(got, "\n"))
	}
	for i, g := range got {
		var name, kind string
		if _, err := fmt.Sscanf(g[strings.Index(g, "target"):], "target %q (%s", &name, &kind); err != nil {
			t.Fatalf("problem %q names no target: %v", g, err)
		}
		if w := fmt.Sprintf(want[i], name, strings.TrimSuffix(kind, "):")); !strings.HasPrefix(g, w) {
			t.Errorf("problem %d: %q; want it to start with %q", i, g, w)
		}
	}
	// The whole error says how many, one problem a line.
	_, err = config.Load(path, env())
	if msg := err.Error(); !strings.Contains(msg, path+": 8 problems:\n  line ") || strings.Count(msg, "\n") != 8 {
		t.Fatalf("Load: %q", msg)
	}
}

// Every kind of problem of a file comes in the same report: fields of the
// wrong type, unknown keys and options, invalid values, missing variables.
func TestEveryProblemInOneRun(t *testing.T) {
	const y = `targets:
  - name: hook
    kind: webhook
    endpoint: https://x.example/h
    timeout: 10
    options:
      tokn_env: TOK
    path: x
  - name: Sup
    kind: zendesk
    endpoint: acme.zendesk.com
    options:
      email: a@b.c
      token_env: ZD
tool:
  - name: t
`
	want := []string{
		`line 5: target "hook" (webhook): timeout: 10 has no unit: durations need a unit: write 10s`,
		`line 7: target "hook" (webhook): unknown option "tokn_env" (known: signing_secret_env, token_env, receiver_dedupes); did you mean "token_env"?`,
		`line 8: target "hook" (webhook): unknown key "path" (known: name, kind, endpoint, timeout, rate_limit, options)`,
		`line 9: target name "Sup": use 1-63 lowercase letters, digits, '-' or '_'`,
		`line 11: target "Sup" (zendesk): endpoint is not an http(s) URL with a host`,
		`line 14: target "Sup" (zendesk): environment variable ZD (options.token_env) is not set`,
		`line 15: unknown key "tool" at the top level (known: key_namespace, targets, tools, grants); did you mean "tools"?`,
		`no tools: define at least one tool bound to a target`,
	}
	got := problemsOf(t, y, env())
	if len(got) != len(want) {
		t.Fatalf("%d problems; want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

// A YAML syntax error is reported at the line that causes it, not at the
// start of the block around it (where the YAML library puts it).
func TestSyntaxErrorLine(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"key indented one space too few", "targets:\n  - name: a\n    kind: local\n   options:\n      path: x\n",
			"line 4: YAML: did not find expected '-' indicator (in the block that starts at line 1); check this line's indentation"},
		{"key indented too few after a deeper block", "targets:\n  - name: a\n    kind: local\n    options:\n        path: x\n      more: y\n",
			"line 6: YAML: did not find expected key (in the block that starts at line 1); check this line's indentation"},
		{"tab", "targets:\n  - name: a\n    kind: local\n\ttimeout: 1s\n", "line 4: YAML: found a tab character that violates indentation"},
		{"key indented too far", "targets:\n  - name: a\n     kind: local\n", "line 3: YAML: mapping values are not allowed in this context; check this line's indentation"},
		{"unclosed flow mapping", "targets:\n  - {name: a,\n     kind: local\ntools: []\n", "line 3: YAML: did not find expected ',' or '}'"}, // the line that lacks it
	} {
		t.Run(c.name, func(t *testing.T) {
			got := problemsOf(t, c.yaml, nil)
			if len(got) != 1 || !strings.HasPrefix(got[0], c.want) {
				t.Fatalf("%q; want one problem starting with %q", got, c.want)
			}
		})
	}
}

// A mistake is one problem: a misspelled required option is not also
// reported missing, and an option written beside options: is pointed at.
func TestOneMistakeOneProblem(t *testing.T) {
	got := problemsOf(t, "targets:\n  - name: s\n    kind: zendesk\n    endpoint: https://acme.zendesk.com\n    options: {email: a@b.c, tokn_env: ZD}\n", env("ZD", "x"))
	if len(got) != 1 || !strings.Contains(got[0], `unknown option "tokn_env"`) || !strings.Contains(got[0], `did you mean "token_env"?`) {
		t.Fatalf("misspelled option: %q", got)
	}
	got = problemsOf(t, "targets:\n  - name: l\n    kind: local\n    options:\n    path: x.jsonl\n", nil)
	if len(got) != 1 || !strings.HasPrefix(got[0], `line 5: target "l" (local): unknown key "path"`) ||
		!strings.HasSuffix(got[0], "path is an option of kind local: indent it under options:") {
		t.Fatalf("option beside options: %q", got)
	}
}

// Decision 0055: an optional secret option that is written needs its
// variable; the error says the line can go instead. Absent, the target
// sends without it.
func TestWrittenOptionalSecretNeedsItsVariable(t *testing.T) {
	const y = "targets:\n  - name: h\n    kind: webhook\n    endpoint: https://x.example/h\n    options:\n      signing_secret_env: HOOK_SECRET\n"
	for _, e := range []func(string) (string, bool){env(), env("HOOK_SECRET", "  ")} {
		got := problemsOf(t, y, e)
		if len(got) != 1 || !strings.HasPrefix(got[0], `line 6: target "h" (webhook): environment variable HOOK_SECRET (options.signing_secret_env) is`) ||
			!strings.HasSuffix(got[0], "the option is optional, but once written its variable must be set (or remove the line)") {
			t.Fatalf("%q", got)
		}
	}
	f, err := config.Parse([]byte(strings.Replace(y, "    options:\n      signing_secret_env: HOOK_SECRET\n", "", 1)), env())
	if err != nil {
		t.Fatal(err)
	}
	if d := f.Defs()[0]; !d.SigningSecret.IsZero() {
		t.Fatalf("no signing_secret_env, yet a secret: %+v", d)
	}
}
