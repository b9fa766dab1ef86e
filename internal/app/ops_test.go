package app_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
	"ticketrelay/request"
	"ticketrelay/ticket"
)

// dispatcherArgs runs a dispatcher on dir with every port chosen at run time.
func dispatcherArgs(dir string, more ...string) []string {
	return append([]string{"-data", dir, "-nats-listen", "127.0.0.1:0", "-metrics-listen", ""}, more...)
}

// stop ends a process started by start and returns its error and stderr;
// the test's cleanup then finds it stopped.
func stop(t *testing.T, r *running) (stderr string, err error) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for start's cleanup
		return r.stderr.String(), err
	case <-time.After(30 * time.Second):
		t.Fatalf("process did not stop within 30s\nstderr:\n%s", r.stderr)
		return "", nil
	}
}

// A word no flag takes (a mistyped subcommand, a stray argument) stops both
// processes with a usage error; the flag package would otherwise drop it and
// everything after it, and the dispatcher would start.
func TestLeftoverArgumentsAreRefused(t *testing.T) {
	t.Chdir(t.TempDir()) // the bare case would use ./data, were it to start
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"bare typo", []string{"stauts"}, []string{`unknown command or argument "stauts"`, "status, redrive, resolve"}},
		{"typo after flags", dispatcherArgs(dir, "stauts", "-json"), []string{`"stauts"`, "status, redrive, resolve"}},
		{"command after flags", dispatcherArgs(dir, "status"), []string{`"status"`, "before the flags"}},
	} {
		t.Run("dispatcher "+c.name, func(t *testing.T) {
			_, _, err := runOnce(t, dispatcher.Run, newEnv(), c.args...)
			if !errors.Is(err, app.ErrUsage) {
				t.Fatalf("%v: error %v, want a usage error", c.args, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: error %q does not say %q", c.args, err, w)
				}
			}
		})
	}
	t.Run("dispatcher made nothing", func(t *testing.T) {
		for _, p := range []string{"data", filepath.Join(dir, "nats"), filepath.Join(dir, "tickets.db")} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("%s exists: a refused dispatcher started", p)
			}
		}
	})
	t.Run("mcp-front", func(t *testing.T) {
		args := []string{"-listen", "127.0.0.1:0", "-metrics-listen", "", "-db", filepath.Join(dir, "f.db"), "serve", "-stdio"}
		_, _, err := runOnce(t, front.Run, newEnv(), args...)
		if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), `unknown command or argument "serve"`) {
			t.Fatalf("%v: error %v, want a usage error naming \"serve\"", args, err)
		}
	})
}

// One dispatcher per data directory: a second one stops with a message that
// names the directory and the holder's pid, the admin commands still work
// beside the first, and the lock goes with the process that held it.
func TestDataDirectoryLock(t *testing.T) {
	dir := t.TempDir()
	first := start(t, dispatcher.Run, newEnv(), dispatcherArgs(dir)...)

	began := time.Now()
	_, _, err := runOnce(t, dispatcher.Run, newEnv(), dispatcherArgs(dir)...)
	if !errors.Is(err, app.ErrDataInUse) || errors.Is(err, app.ErrUsage) {
		t.Fatalf("a second dispatcher on %s: error %v, want app.ErrDataInUse", dir, err)
	}
	for _, w := range []string{dir, "in use", fmt.Sprintf("pid %d", os.Getpid()), "dispatcher.lock"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the second dispatcher took %s to stop", took)
	}
	// The admin commands do not take the lock.
	out, _, err := runOnce(t, dispatcher.Run, newEnv(), "status", "-data", dir)
	if err != nil || !strings.Contains(out, "outbox backlog: 0") {
		t.Fatalf("status beside a running dispatcher: %v\n%s", err, out)
	}
	if !strings.Contains(first.stderr.String(), "dispatcher running") || strings.Contains(first.stderr.String(), "level=ERROR") {
		t.Errorf("the first dispatcher was disturbed:\n%s", first.stderr)
	}
	if stderr, err := stop(t, first); err != nil {
		t.Fatalf("first dispatcher: %v\n%s", err, stderr)
	}
	// Released with its holder: a new dispatcher takes the directory.
	start(t, dispatcher.Run, newEnv(), dispatcherArgs(dir)...)
}

// A busy -nats-listen port stops the dispatcher at once with the listen error.
func TestDispatcherNATSPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	began := time.Now()
	_, _, err = runOnce(t, dispatcher.Run, newEnv(), "-data", t.TempDir(), "-nats-listen", ln.Addr().String(), "-metrics-listen", "")
	if err == nil || !strings.Contains(err.Error(), "-nats-listen "+ln.Addr().String()+": the port is in use") || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("error %v: want the listen error on %s, naming -nats-listen", err, ln.Addr())
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("took %s to fail", took)
	}
}

// The admin commands never create a database: a mistyped path is an error.
func TestAdminNeedsAnExistingDatabase(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"status", "-db", filepath.Join(dir, "tickest.db")},
		{"status", "-data", filepath.Join(dir, "dta")},
		{"redrive", "-failed", "-db", filepath.Join(dir, "tickest.db")},
		{"resolve", "x", "-failed", "-data", dir},
	} {
		_, _, err := runOnce(t, dispatcher.Run, newEnv(), args...)
		if err == nil || errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "no database at "+dir) {
			t.Errorf("%v: error %v, want \"no database at PATH\"", args, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Errorf("the admin commands left %v in %s (%v)", entries, dir, err)
	}
}

// status -json has snake_case keys only, the age in seconds.
func TestStatusJSONKeys(t *testing.T) {
	a := newAdminDB(t)
	a.request(t, "req-failed", "support", string(request.StatusFailed), 1, "permanent error", "")
	a.request(t, "req-uncertain", "alerts", string(request.StatusUncertain), 1, "no answer", "")
	if _, err := a.l.Create(t.Context(), queued(t, "req-queued")); err != nil {
		t.Fatal(err)
	}
	out, err := a.admin(t, "status", "-json")
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got, want := sortedKeys(s), []string{"backlog", "dispatchers", "oldest_age_seconds", "targets", "uncertain"}; !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v:\n%s", got, want, out)
	}
	var age float64
	if err := json.Unmarshal(s["oldest_age_seconds"], &age); err != nil || age <= 0 || age > 600 {
		t.Errorf("oldest_age_seconds %s (%v): want a positive number of seconds below 600", s["oldest_age_seconds"], err)
	}
	var targets []map[string]any
	if err := json.Unmarshal(s["targets"], &targets); err != nil || len(targets) != 2 {
		t.Fatalf("targets %s (%v): want 2", s["targets"], err)
	}
	want := []string{"delivered", "failed", "in_flight", "retrying", "served", "target", "uncertain", "waiting"}
	for _, tc := range targets {
		if got := sortedKeys(tc); !slices.Equal(got, want) {
			t.Errorf("target keys %v, want %v", got, want)
		}
		// req-queued waits for support, which no dispatcher serves here.
		if tc["target"] == "support" && (tc["waiting"] != 1.0 || tc["served"] != false) {
			t.Errorf("support: %v, want 1 waiting, not served", tc)
		}
	}
	var unc []map[string]any
	if err := json.Unmarshal(s["uncertain"], &unc); err != nil || len(unc) != 1 || unc[0]["request_id"] != "req-uncertain" {
		t.Errorf("uncertain %s (%v): want req-uncertain", s["uncertain"], err)
	}

	// An empty ledger gives empty lists, not null.
	empty := newAdminDB(t)
	out, err = empty.admin(t, "status", "-json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil || string(s["targets"]) != "[]" || string(s["uncertain"]) != "[]" {
		t.Errorf("empty ledger: %v\n%s", err, out)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// redrive names what is wrong: a request never accepted, a target the
// ledger has never delivered to.
func TestRedriveUnknowns(t *testing.T) {
	a := newAdminDB(t)
	a.request(t, "req-failed", "support", string(request.StatusFailed), 1, "permanent error", "")
	a.request(t, "req-delivered", "ops", string(request.StatusDelivered), 1, "", "X-1")
	if _, err := a.l.Create(t.Context(), queued(t, "req-queued")); err != nil {
		t.Fatal(err)
	}

	_, err := a.admin(t, "redrive", "req-never-seen")
	if !errors.Is(err, request.ErrNotFound) || strings.Contains(err.Error(), "on its way") {
		t.Errorf("redrive of a request never accepted: %v; want no such request", err)
	}
	_, err = a.admin(t, "redrive", "req-queued")
	if !errors.Is(err, request.ErrState) || !strings.Contains(err.Error(), "on its way") {
		t.Errorf("redrive of a request not yet tried: %v; want \"still on its way\"", err)
	}

	out, err := a.admin(t, "redrive", "-failed", "-target", "suport")
	if err == nil || errors.Is(err, app.ErrUsage) {
		t.Fatalf("redrive -failed -target suport: %v, output %q; want an error", err, out)
	}
	for _, w := range []string{`"suport"`, "ops, support"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if st := a.find(t, "req-failed"); st.Status != request.StatusFailed {
		t.Errorf("req-failed is %s after a refused redrive", st.Status)
	}
	// A known target with nothing failed is no error.
	out, err = a.admin(t, "redrive", "-failed", "-target", "ops")
	if err != nil || !strings.Contains(out, "0 failed requests redriven") {
		t.Errorf("redrive -failed -target ops: %v, output %q", err, out)
	}
}

// The admin commands' own flags have no environment twin: an exported
// TICKETRELAY_FAILED=true must not turn `redrive` into "redrive everything".
// -db keeps its twin.
func TestAdminFlagsIgnoreTheEnvironment(t *testing.T) {
	a := newAdminDB(t)
	a.request(t, "req-failed", "support", string(request.StatusFailed), 1, "permanent error", "")
	a.request(t, "req-uncertain", "alerts", string(request.StatusUncertain), 1, "no answer", "")
	env := newEnv("TICKETRELAY_FAILED", "true", "TICKETRELAY_TARGET", "support", "TICKETRELAY_JSON", "true",
		"TICKETRELAY_DELIVERED", "X-9", "TICKETRELAY_DB", a.path)

	if _, _, err := runOnce(t, dispatcher.Run, env, "redrive"); !errors.Is(err, app.ErrUsage) {
		t.Errorf("bare redrive with TICKETRELAY_FAILED=true: %v; want a usage error", err)
	}
	if st := a.find(t, "req-failed"); st.Status != request.StatusFailed {
		t.Errorf("req-failed is %s: the environment redrove it", st.Status)
	}
	out, _, err := runOnce(t, dispatcher.Run, env, "status")
	if err != nil || strings.HasPrefix(strings.TrimSpace(out), "{") || !strings.Contains(out, "outbox backlog") {
		t.Errorf("status with TICKETRELAY_JSON=true (and the database from TICKETRELAY_DB): %v\n%s", err, out)
	}
	if _, _, err := runOnce(t, dispatcher.Run, env, "resolve", "req-uncertain"); !errors.Is(err, app.ErrUsage) {
		t.Errorf("resolve with TICKETRELAY_DELIVERED and TICKETRELAY_FAILED: %v; want a usage error", err)
	}
	if st := a.find(t, "req-uncertain"); st.Status != request.StatusUncertain {
		t.Errorf("req-uncertain is %s: the environment resolved it", st.Status)
	}
	for cmd, own := range map[string][]string{"status": {"json"}, "redrive": {"failed", "target"}, "resolve": {"failed", "delivered"}} {
		stdout, _, err := runOnce(t, dispatcher.Run, env, cmd, "-help")
		if err != nil {
			t.Fatal(err)
		}
		entries := helpFlags(stdout)
		for _, f := range own {
			if e, ok := entries[f]; !ok || strings.Contains(e, "TICKETRELAY_") {
				t.Errorf("%s -help entry of -%s: %q; want listed, without a twin", cmd, f, e)
			}
		}
		if !strings.Contains(entries["db"], "TICKETRELAY_DB") {
			t.Errorf("%s -help: -db lost its twin: %q", cmd, entries["db"])
		}
	}
}

// A clean shutdown is not a warning.
func TestDispatcherStopsQuietly(t *testing.T) {
	r := start(t, dispatcher.Run, newEnv(), dispatcherArgs(t.TempDir())...)
	stderr, err := stop(t, r)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if strings.Contains(stderr, "nats disconnected") || strings.Contains(stderr, "err=<nil>") {
		t.Errorf("a clean shutdown logged a disconnection:\n%s", stderr)
	}
}

// queued is a valid request for the ledger to accept.
func queued(t *testing.T, id string) ticket.Request {
	t.Helper()
	req := ticket.Request{RequestID: id, Tool: "create_ticket", Target: "support", Title: "Queued " + id}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	return req
}

// The embedded nats-server has no TLS: the dispatcher refuses to
// open it beyond loopback, before it touches anything.
func TestEmbeddedNATSStaysOnLoopback(t *testing.T) {
	dir := t.TempDir()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:4222"} {
		_, _, err := runOnce(t, dispatcher.Run, newEnv(), "-data", dir, "-nats-listen", addr, "-metrics-listen", "")
		if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "loopback only") {
			t.Errorf("-nats-listen %s: error %v, want a usage error saying loopback only", addr, err)
		}
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("the refused starts left %v in %s (%v)", entries, dir, err)
	}
}

// status shows what waits for a target no running dispatcher delivers to:
// such requests have no delivery record and appeared nowhere before.
func TestStatusShowsUnservedTargets(t *testing.T) {
	a := newAdminDB(t)
	if err := a.l.NewPresence("other-dispatcher", []string{"hook"}, "").Announce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.l.Create(t.Context(), queued(t, "req-waits")); err != nil { // target support
		t.Fatal(err)
	}
	// A target the configuration no longer has, with a past request.
	a.request(t, "req-old", "local", string(request.StatusDelivered), 1, "", "1")
	out, err := a.admin(t, "status")
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`(?m)^dispatchers running: 1$`, `(?m)^support\s+1\s+0\s+0\s+0\s+0\s+0\s+not served\s*$`,
		`(?m)^hook\s+0\s+0\s+0\s+0\s+0\s+0\s*$`, `no running dispatcher delivers to support: `,
		`(?m)^local\s+0\s+1\s+0\s+0\s+0\s+0\s+not configured \(past requests only\)\s*$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("status does not match %s:\n%s", re, out)
		}
	}
}
