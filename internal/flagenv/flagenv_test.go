package flagenv_test

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"ticketrelay/internal/flagenv"
)

type flags struct {
	fs      *flag.FlagSet
	dataDir *string
	workers *int
	wait    *time.Duration
	stdio   *bool
}

func newFlags() flags {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return flags{
		fs:      fs,
		dataDir: fs.String("data-dir", "data", "where the data lives"),
		workers: fs.Int("workers", 4, "forwarder workers"),
		wait:    fs.Duration("poll-interval", 20*time.Millisecond, "idle poll `interval`"),
		stdio:   fs.Bool("stdio", false, "serve MCP on stdin/stdout"),
	}
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{
		"data-dir":      "TICKETRELAY_DATA_DIR",
		"stdio":         "TICKETRELAY_STDIO",
		"poll-interval": "TICKETRELAY_POLL_INTERVAL",
		"a-b-c":         "TICKETRELAY_A_B_C",
	} {
		if got := flagenv.EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEnvTwinApplies(t *testing.T) {
	f := newFlags()
	set, err := flagenv.Parse(f.fs, nil, env(map[string]string{
		"TICKETRELAY_DATA_DIR":      "/var/lib/ticketrelay",
		"TICKETRELAY_POLL_INTERVAL": "250ms",
		"TICKETRELAY_STDIO":         "true",
		"DATA_DIR":                  "/wrong", // no prefix: ignored
	}))
	if err != nil {
		t.Fatal(err)
	}
	if *f.dataDir != "/var/lib/ticketrelay" || *f.wait != 250*time.Millisecond || !*f.stdio || *f.workers != 4 {
		t.Fatalf("values: data-dir %q poll %v stdio %v workers %d", *f.dataDir, *f.wait, *f.stdio, *f.workers)
	}
	if !set["data-dir"] || !set["poll-interval"] || !set["stdio"] || set["workers"] || len(set) != 3 {
		t.Fatalf("set = %v, want data-dir, poll-interval and stdio", set)
	}
}

func TestFlagBeatsEnv(t *testing.T) {
	f := newFlags()
	set, err := flagenv.Parse(f.fs, []string{"-workers", "9", "-data-dir=/flag", "rest"}, env(map[string]string{
		"TICKETRELAY_WORKERS":  "2",
		"TICKETRELAY_DATA_DIR": "/env",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if *f.workers != 9 || *f.dataDir != "/flag" {
		t.Fatalf("workers %d data-dir %q: the command line must win", *f.workers, *f.dataDir)
	}
	if !set["workers"] || !set["data-dir"] || len(set) != 2 {
		t.Fatalf("set = %v", set)
	}
	if args := f.fs.Args(); len(args) != 1 || args[0] != "rest" {
		t.Fatalf("remaining args %q", args)
	}
}

func TestBadEnvValue(t *testing.T) {
	f := newFlags()
	_, err := flagenv.Parse(f.fs, []string{"-workers", "3"}, env(map[string]string{
		"TICKETRELAY_WORKERS":       "many",
		"TICKETRELAY_POLL_INTERVAL": "soon",
	}))
	if err == nil {
		t.Fatal("Parse accepted TICKETRELAY_WORKERS=many")
	}
	for _, want := range []string{"invalid environment", `TICKETRELAY_WORKERS="many"`, `TICKETRELAY_POLL_INTERVAL="soon"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	// -help is answered whatever the environment holds.
	if _, err := flagenv.Parse(newFlags().fs, []string{"-help"}, env(map[string]string{"TICKETRELAY_WORKERS": "many"})); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-help with TICKETRELAY_WORKERS=many: %v, want flag.ErrHelp", err)
	}
	// A bad flag is the flag package's error.
	if _, err := flagenv.Parse(newFlags().fs, []string{"-workers", "x"}, env(nil)); err == nil {
		t.Fatal("Parse accepted -workers x")
	}
}

// TestParseExcept: a flag without a twin ignores its environment variable
// and shows none in -help; the others keep theirs.
func TestParseExcept(t *testing.T) {
	f := newFlags()
	set, err := flagenv.ParseExcept(f.fs, nil, env(map[string]string{
		"TICKETRELAY_STDIO":    "true",
		"TICKETRELAY_WORKERS":  "7",
		"TICKETRELAY_DATA_DIR": "/env",
	}), "stdio", "workers")
	if err != nil {
		t.Fatal(err)
	}
	if *f.stdio || *f.workers != 4 || *f.dataDir != "/env" {
		t.Fatalf("stdio %v workers %d data-dir %q: want false, 4 (no twins) and /env", *f.stdio, *f.workers, *f.dataDir)
	}
	if !set["data-dir"] || len(set) != 1 {
		t.Fatalf("set = %v, want data-dir only", set)
	}
	var buf bytes.Buffer
	new(flagenv.Help).Print(&buf, f.fs, "stdio", "workers")
	usage := buf.String()
	if strings.Contains(usage, "TICKETRELAY_STDIO") || strings.Contains(usage, "TICKETRELAY_WORKERS") {
		t.Errorf("usage shows a twin for a flag without one:\n%s", usage)
	}
	if !strings.Contains(usage, "(env TICKETRELAY_DATA_DIR, ") {
		t.Errorf("usage lost -data-dir's twin:\n%s", usage)
	}
	// On the command line the flag still works.
	g := newFlags()
	if _, err := flagenv.ParseExcept(g.fs, []string{"-stdio"}, env(nil), "stdio"); err != nil || !*g.stdio {
		t.Fatalf("-stdio on the command line: %v, stdio %v", err, *g.stdio)
	}
}
