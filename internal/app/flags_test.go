package app_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
	"ticketrelay/internal/flagenv"
)

// helpFlags parses PrintDefaults output into flag name → its whole entry.
func helpFlags(out string) map[string]string {
	entries := map[string]string{}
	re := regexp.MustCompile(`^  -([a-z][a-z0-9-]*)`)
	var cur string
	for line := range strings.SplitSeq(out, "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			cur = m[1]
			entries[cur] = line
			continue
		}
		if cur != "" && strings.HasPrefix(line, "    ") {
			entries[cur] += "\n" + line
			continue
		}
		cur = ""
	}
	return entries
}

func TestFlags(t *testing.T) {
	procs := []struct {
		name string
		run  func(context.Context, app.Env) error
		core []string // flags that must be listed
	}{
		{"mcp-front", front.Run, []string{"db", "listen", "metrics-listen", "stdio", "config", "log-level", "allowed-origins", "stateless", "addr-file"}},
		{"dispatcher", dispatcher.Run, []string{"db", "data", "nats", "nats-listen", "metrics-listen", "config", "log-level",
			"lease-ttl", "dup-window", "workers", "max-attempts", "retry-base", "retry-max", "delivery-timeout", "retention", "poll-interval", "audit-after", "addr-file"}},
	}
	for _, p := range procs {
		t.Run(p.name+" -help", func(t *testing.T) {
			// A bad environment value does not keep -help from answering.
			stdout, stderr, err := runOnce(t, p.run, newEnv("TICKETRELAY_LOG_LEVEL", "loud", "TICKETRELAY_INSECURE", "maybe"), "-help")
			if err != nil {
				t.Fatalf("-help: %v", err)
			}
			// Asked for, -help is the output: on stdout, for a pager or grep.
			if stderr != "" {
				t.Errorf("-help wrote to stderr: %q", stderr)
			}
			entries := helpFlags(stdout)
			for _, f := range p.core {
				if _, ok := entries[f]; !ok {
					t.Errorf("-help does not list -%s:\n%s", f, stdout)
				}
			}
			checkSections(t, stdout)
			for f, e := range entries {
				if f == "version" {
					// No twin: a TICKETRELAY_VERSION set for something
					// else must not make the service print and exit.
					if strings.Contains(e, flagenv.EnvName(f)) {
						t.Errorf("-help: -version shows an environment twin:\n%s", e)
					}
					continue
				}
				if !strings.Contains(e, flagenv.EnvName(f)) {
					t.Errorf("-help: -%s does not show its environment twin %s:\n%s", f, flagenv.EnvName(f), e)
				}
			}
		})
		t.Run(p.name+" bad flag", func(t *testing.T) {
			for _, args := range [][]string{{"-no-such-flag"}, {"-log-level", "loud"}, {"-metrics-listen"}} {
				_, _, err := runOnce(t, p.run, newEnv(), args...)
				if !errors.Is(err, app.ErrUsage) {
					t.Errorf("%v: error %v, want app.ErrUsage", args, err)
				}
			}
			// A malformed environment twin is a usage error too.
			_, _, err := runOnce(t, p.run, newEnv("TICKETRELAY_LOG_LEVEL", "loud"))
			if !errors.Is(err, app.ErrUsage) {
				t.Errorf("TICKETRELAY_LOG_LEVEL=loud: error %v, want app.ErrUsage", err)
			}
		})
	}
	t.Run("dispatcher bad durations", func(t *testing.T) {
		for _, args := range [][]string{{"-retry-base", "soon"}, {"-dup-window", "1m"}, {"-dup-window", "2h", "-retention", "1h"},
			{"-audit-after", "30s"}, {"-audit-after", "2m", "-delivery-timeout", "3m"}, {"-audit-after", "-1m"}} {
			_, _, err := runOnce(t, dispatcher.Run, newEnv(), append(args, "-data", t.TempDir())...)
			if !errors.Is(err, app.ErrUsage) {
				t.Errorf("%v: error %v, want app.ErrUsage", args, err)
			}
		}
	})

	t.Run("TICKETRELAY_LISTEN applies", func(t *testing.T) {
		port := freePort(t)
		dir := t.TempDir()
		env := newEnv("TICKETRELAY_LISTEN", port, "TICKETRELAY_METRICS_LISTEN", "", "TICKETRELAY_DB", filepath.Join(dir, "env.db"), "TICKETRELAY_CREATE_DB", "true")
		r := start(t, front.Run, env)
		if r.addrs["mcp"] != port {
			t.Fatalf("listening on %s, want %s from TICKETRELAY_LISTEN", r.addrs["mcp"], port)
		}
		if _, ok := r.addrs["metrics"]; ok {
			t.Errorf("TICKETRELAY_METRICS_LISTEN= should turn metrics off: %v", r.addrs)
		}
		if _, err := os.Stat(filepath.Join(dir, "env.db")); err != nil {
			t.Errorf("TICKETRELAY_DB was not used: %v", err)
		}
		resp, err := http.Get("http://" + port + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz: %s", resp.Status)
		}
	})

	t.Run("a flag wins over its twin", func(t *testing.T) {
		// Were the twin used, the front would listen on port 1 (or fail to bind it).
		env := newEnv("TICKETRELAY_LISTEN", "127.0.0.1:1")
		r, _ := startFront(t, env)
		if strings.HasSuffix(r.addrs["mcp"], ":1") {
			t.Fatalf("listening on %s: the environment won over -listen", r.addrs["mcp"])
		}
	})
}

// checkSections checks -help's layout: the synopsis first, a short
// section of common flags before the advanced ones, every flag in a
// section of its own topic (none left under "Other flags"), each listed
// once.
func checkSections(t *testing.T, help string) {
	t.Helper()
	if !strings.HasPrefix(help, "Usage: ") {
		t.Errorf("-help does not start with the synopsis:\n%s", help)
	}
	var headings []string
	count := map[string]int{}
	seen := map[string]int{}
	re := regexp.MustCompile(`^  -([a-z][a-z0-9-]*)`)
	for line := range strings.SplitSeq(help, "\n") {
		if strings.HasSuffix(line, "flags:") || strings.HasPrefix(line, "Advanced: ") {
			headings = append(headings, line)
			continue
		}
		if m := re.FindStringSubmatch(line); m != nil && len(headings) > 0 {
			count[headings[len(headings)-1]]++
			seen[m[1]]++
		}
	}
	if len(headings) < 2 || headings[0] != flagenv.Common+":" {
		t.Fatalf("-help headings %q: want %q first, then the advanced ones", headings, flagenv.Common+":")
	}
	if n := count[headings[0]]; n < 5 || n > 12 {
		t.Errorf("%d common flags: the section is meant to be short (5 to 12)", n)
	}
	for _, h := range headings[1:] {
		if !strings.HasPrefix(h, "Advanced: ") || count[h] == 0 {
			t.Errorf("heading %q after the common flags: want an advanced section with flags", h)
		}
	}
	for f, n := range seen {
		if n != 1 {
			t.Errorf("-%s is listed %d times", f, n)
		}
	}
}

// freePort returns a loopback address with a port nothing listens on now.
