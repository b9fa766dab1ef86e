package flagenv_test

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"ticketrelay/internal/flagenv"
)

// grouped declares flags in two sections, one hidden flag and one in no
// section.
func grouped() (*flag.FlagSet, *flagenv.Help) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var h flagenv.Help
	h.Section(flagenv.Common, fs, func() {
		fs.String("listen", "127.0.0.1:8080", "HTTP `address` to serve on")
		fs.String("config", "", "configuration `file`")
	})
	h.Section("Limits", fs, func() {
		fs.Duration("session-timeout", 30*time.Minute, "close sessions idle this long (`duration`); "+
			"a long description that has to be wrapped because it goes well past the eighty columns of a terminal")
		fs.Int("max-sessions", 0, "sessions open at once (`n`; 0: no bound)")
	})
	h.Section(flagenv.Common, fs, func() { fs.Bool("stdio", false, "serve on stdin/stdout") })
	h.Hide(fs, func() { fs.Bool("bench-only", false, "for benchmarks") })
	fs.String("stray", "x", "declared in no section")
	return fs, &h
}

func TestHelpSections(t *testing.T) {
	fs, h := grouped()
	// A value from the environment is not the default -help shows.
	if _, err := flagenv.Parse(fs, nil, env(map[string]string{"TICKETRELAY_LISTEN": "127.0.0.1:9999"})); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	h.Print(&buf, fs)
	out := buf.String()
	want := `
Common flags:
  -config file  (env TICKETRELAY_CONFIG)
        configuration file
  -listen address  (env TICKETRELAY_LISTEN, default "127.0.0.1:8080")
        HTTP address to serve on
  -stdio  (env TICKETRELAY_STDIO)
        serve on stdin/stdout

Limits:
  -max-sessions n  (env TICKETRELAY_MAX_SESSIONS)
        sessions open at once (n; 0: no bound)
  -session-timeout duration  (env TICKETRELAY_SESSION_TIMEOUT, default 30m0s)
        close sessions idle this long (duration); a long description that has to
        be wrapped because it goes well past the eighty columns of a terminal

Other flags:
  -stray string  (env TICKETRELAY_STRAY, default "x")
        declared in no section
`
	if out != want {
		t.Errorf("help:\n%s\nwant:\n%s", out, want)
	}
	for l := range strings.SplitSeq(out, "\n") {
		if len(l) > 80 {
			t.Errorf("line of %d columns: %q", len(l), l)
		}
	}
	// The hidden flag is still a flag, with its twin.
	if _, err := flagenv.Parse(fs, []string{"-bench-only"}, env(nil)); err != nil {
		t.Errorf("-bench-only: %v", err)
	}
}

// A Help with no sections lists every flag under "Flags".
func TestHelpWithoutSections(t *testing.T) {
	f := newFlags()
	var buf bytes.Buffer
	new(flagenv.Help).Print(&buf, f.fs)
	out := buf.String()
	if !strings.HasPrefix(out, "\nFlags:\n  -data-dir string  (env TICKETRELAY_DATA_DIR, default \"data\")\n") ||
		strings.Count(out, "\n  -") != 4 || !strings.Contains(out, "  -poll-interval interval  (env TICKETRELAY_POLL_INTERVAL, default 20ms)\n") {
		t.Errorf("help:\n%s", out)
	}
}
