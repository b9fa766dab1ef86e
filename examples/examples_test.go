// Package examples_test checks that every example configuration starts as
// it is once the environment variables its header lists are set, and that
// the header lists every variable the file needs.
package examples_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"ticketrelay/config"
	"ticketrelay/delivery/targets"
)

// samples are values of the right form for variables whose adapter checks
// the form; any other variable gets a plain token.
var samples = map[string]string{
	"WEBHOOK_SECRET":        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	"OPS_HOOK_SECRET":       "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	"PAGERDUTY_ROUTING_KEY": "0123456789abcdef0123456789abcdef",
	"SLACK_WEBHOOK_URL":     "https://hooks.slack.example/services/T0/B0/X",
}

var varLineRE = regexp.MustCompile(`^#\s{2,}([A-Z][A-Z0-9_]*)\s`)

// headerVars reads the variables a file's header lists: the lines indented
// under "# Environment (…):", up to the first line that is not one. A file
// that needs none says "# Environment: none."
func headerVars(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var vars []string
	in, found := false, false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		switch {
		case line == "# Environment: none.":
			return nil
		case strings.HasPrefix(line, "# Environment ("):
			in, found = true, true
		case in:
			m := varLineRE.FindStringSubmatch(line)
			if m == nil && !strings.HasPrefix(line, "#    ") {
				in = false // a continuation line of a description is indented further
			} else if m != nil {
				vars = append(vars, m[1])
			}
		}
	}
	if !found {
		t.Fatalf("%s: no \"# Environment\" header lists the variables it needs", path)
	}
	return vars
}

func TestExamplesStartWithTheVariablesTheyList(t *testing.T) {
	paths, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, path := range paths {
		t.Run(path, func(t *testing.T) {
			listed := headerVars(t, path)
			var read []string
			lookup := func(name string) (string, bool) {
				read = append(read, name)
				if !slices.Contains(listed, name) {
					return "", false // a variable the header does not list: the load fails and names it
				}
				if v, ok := samples[name]; ok {
					return v, true
				}
				return "example-" + strings.ToLower(name), true
			}
			cfg, err := config.Load(path, lookup)
			if err != nil {
				t.Fatalf("with the variables its header lists (%s) set: %v", strings.Join(listed, ", "), err)
			}
			for _, v := range listed {
				if !slices.Contains(read, v) {
					t.Errorf("the header lists %s, which the file does not use", v)
				}
			}
			if _, err := config.Load(path, nil); err != nil {
				t.Fatalf("read for its shape (mcp-front): %v", err)
			}
			// Building the adapters is what the dispatcher does next; none
			// dials at this point. It runs in a fresh directory with its
			// default data directory, ./data, where a relative path of a
			// local target points.
			t.Chdir(t.TempDir())
			if err := os.Mkdir("data", 0o700); err != nil {
				t.Fatal(err)
			}
			ts, closeAll, err := targets.Open(cfg.Defs(), "data", time.Now)
			if err != nil {
				t.Fatalf("open the targets: %v", err)
			}
			if err := closeAll(); err != nil {
				t.Fatal(err)
			}
			if path != "ticketrelay.yaml" {
				if len(ts) != 1 || strings.TrimSuffix(path, ".yaml") != cfg.Defs()[0].Kind {
					t.Fatalf("%s: want one target of kind %s; got %+v", path, strings.TrimSuffix(path, ".yaml"), cfg.Defs())
				}
				kinds[cfg.Defs()[0].Kind] = true
			}
		})
	}
	for _, k := range targets.KindNames() {
		if !kinds[k] {
			t.Errorf("no minimal example for kind %s (examples/%s.yaml)", k, k)
		}
	}
}
