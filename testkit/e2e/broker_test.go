package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/testkit/e2eproc"
)

// The embedded nats-server admits the dispatcher (and an operator holding
// the seed in the data directory) only: an anonymous client is refused at
// connect, so it can neither read, publish, purge nor delete anything. The
// seed is private, kept across restarts, and `dispatcher status` says how to
// point the nats CLI at the server.
func TestEmbeddedBrokerNeedsTheDataDirectorysCredential(t *testing.T) {
	s := newStack(t)
	disp := s.startDispatcher(t)
	url := disp.Addr("nats")

	anon, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err == nil {
		anon.Close()
		t.Fatal("an anonymous client was admitted by the embedded nats-server")
	}
	if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("anonymous connect: %v, want an authorization violation", err)
	}
	for _, bad := range []nats.Option{nats.UserInfo("ticketrelay", ""), nats.Token("x")} {
		if c, err := nats.Connect(url, bad, nats.Timeout(5*time.Second)); err == nil {
			c.Close()
			t.Fatal("a client with a guessed user or token was admitted")
		}
	}

	seed := filepath.Join(s.dir, natsjs.SeedFile)
	fi, err := os.Stat(seed)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %#o, want 0600", seed, fi.Mode().Perm())
	}
	before, err := os.ReadFile(seed)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := brokerJS(t, s.dir, url).Stream(ctx, "TICKETS"); err != nil {
		t.Fatalf("the seed's holder cannot read the stream: %v", err)
	}

	out, err := exec.Command(dispatcherBin, "status", "-data", s.dir).CombinedOutput()
	if err != nil {
		t.Fatalf("dispatcher status: %v\n%s", err, out)
	}
	if want := "nats --server " + url + " --nkey " + seed + " stream info TICKETS"; !strings.Contains(string(out), want) {
		t.Errorf("dispatcher status does not say %q:\n%s", want, out)
	}

	disp.Stop(t)
	s.startDispatcher(t)
	after, err := os.ReadFile(seed)
	if err != nil || string(after) != string(before) {
		t.Fatalf("the seed changed across a restart (%v)", err)
	}
	if _, err := brokerJS(t, s.dir, s.disp.Addr("nats")).Stream(ctx, "TICKETS"); err != nil {
		t.Fatalf("after a restart, the same seed cannot read the stream: %v", err)
	}
}

// A -nats URL with a password in it is refused before anything starts, with
// one line that says what to use instead and does not repeat the password.
func TestNATSURLWithPasswordIsRefused(t *testing.T) {
	cmd := exec.Command(dispatcherBin, "-data", t.TempDir(), "-metrics-listen", "", "-nats", "nats://ticketrelay:s3cr3t-pw@127.0.0.1:4222")
	cmd.Env = e2eproc.Environ()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit %v, want status 2 (usage):\n%s", err, out)
	}
	msg := strings.TrimSpace(string(out))
	if strings.Contains(msg, "s3cr3t-pw") || !contains(msg, "-nats-creds", "TICKETRELAY_NATS_PASSWORD") || strings.Count(msg, "\n") > 0 {
		t.Fatalf("refusal %q: want one line naming -nats-creds and TICKETRELAY_NATS_PASSWORD, without the password", msg)
	}
}

// A dispatcher whose -nats server cannot be reached says so within a
// second, naming the URL and the cause, serves /metrics meanwhile, and
// stops with status 0 on SIGTERM while it waits.
func TestUnreachableNATSServer(t *testing.T) {
	dir := t.TempDir()
	natsAddr, err := e2eproc.FreeAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr, err := e2eproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	natsURL := "nats://" + natsAddr
	began := time.Now()
	p, err := e2eproc.Launch(context.Background(), dir, e2eproc.Spec{
		Name: "dispatcher-unreachable", Bin: dispatcherBin, TCPAddr: metricsAddr,
		Args: []string{"-data", dir, "-nats", natsURL, "-installation", "unreachable", "-metrics-listen", metricsAddr},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			e2eproc.DumpLog(t, p.Name(), filepath.Join(dir, p.Name()+".log"))
		}
		if !p.Exited() {
			p.Kill9()
			<-p.Done()
		}
	})
	var said time.Duration
	waitFor(t, 5*time.Second, "the dispatcher to say it waits for the NATS server", func() bool {
		if contains(p.Log(), "waiting for the NATS server", natsURL, "connection refused") {
			said = time.Since(began)
			return true
		}
		return false
	})
	// How long it had waited when it said so, by its own clock (the line's
	// waiting attribute): launching a race-built binary on a busy machine
	// takes what it takes, and is not the dispatcher's wait.
	m := regexp.MustCompile(`waiting=([0-9.]+m?s)`).FindStringSubmatch(p.Log())
	if m == nil {
		t.Fatalf("no waiting= on the line saying it waits:\n%s", p.Log())
	}
	waited, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("said it waits %s after its launch, having waited %s", said.Round(time.Millisecond), waited)
	if waited < 500*time.Millisecond || waited > time.Second {
		t.Errorf("the dispatcher said it waits having waited %s, want half a second to a second", waited)
	}
	if strings.Count(p.Log(), "waiting for the NATS server") != 1 {
		t.Errorf("want one line saying it waits:\n%s", p.Log())
	}
	if _, err := e2eproc.Scrape(metricsAddr); err != nil {
		t.Fatalf("/metrics while waiting for NATS: %v", err)
	}

	p.ExpectExit()
	if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(e2eproc.StopTimeout):
		t.Fatalf("still running %s after SIGTERM", e2eproc.StopTimeout)
	}
	if p.Err() != nil {
		t.Fatalf("SIGTERM while waiting for NATS: %v, want exit status 0\n%s", p.Err(), p.Tail(2000))
	}
}
