package debiannats_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/installation"
	"ticketrelay/testkit/e2eproc"
)

// The sequence on Debian's nats-server: first start, stop, second
// start. A server older than 2.10 is refused at the first start with one
// line naming its version, the version needed and why, and nothing is
// written to it; the second start is refused the same way, never with "the
// stream belongs to someone else". A newer server delivers a ticket after
// each start.
func TestDispatcherStartsTwiceOrIsRefusedAtFirst(t *testing.T) {
	needDebian(t)
	dir := t.TempDir()
	_, url := e2eproc.StartNATSServer(t, dir, "debian-nats", debianBin, filepath.Join(dir, "store"), !debianTooOld)
	s := newStack(t)
	s.create(t, "first")
	if !debianTooOld {
		d := s.startDispatcher(t, url)
		s.waitDelivered(t, "first")
		d.Stop(t)
		s.startDispatcher(t, url)
		s.create(t, "second")
		s.waitDelivered(t, "second")
		return
	}
	for _, start := range []string{"first", "second"} {
		lines := s.refusedDispatcher(t, url)
		checkRefusal(t, start+" start", lines)
		if names := e2eproc.StreamNames(t, e2eproc.JetStream(t, url)); len(names) != 0 {
			t.Fatalf("after the %s start the refused server holds streams %v", start, names)
		}
	}
	if st := s.status(t, "first"); st != "queued" {
		t.Errorf("the ticket filed meanwhile is %s, want queued (kept for a dispatcher that can run)", st)
	}
}

// checkRefusal checks a refused dispatcher's output: its last line, and its
// only error line, says the server is too old, which version it runs and
// which it needs, and why.
func checkRefusal(t *testing.T, what string, lines []string) {
	t.Helper()
	last := lines[len(lines)-1]
	t.Logf("%s: %s", what, last)
	for _, want := range []string{"dispatcher: ", "too old", "nats-server " + debianVersion, "2.10 or later", "metadata", "sync_interval: always", "upgrade"} {
		if !strings.Contains(last, want) {
			t.Errorf("%s: the refusal %q does not say %q", what, last, want)
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "belongs to someone else") || strings.Contains(l, "not ready; retrying") {
			t.Errorf("%s: %s", what, l)
		}
	}
}

// The way forward from a stream a ticketrelay made on Debian's 2.9 before
// it refused such servers (which dropped the stream's marks, so that the
// dispatcher could not start again): the dispatcher still refuses the old
// server, with the same line; the operator upgrades the server, keeping
// its store; the next start takes the stream, marks it and delivers the
// tickets filed meanwhile, and so do the starts after it.
func TestUpgradeFromDebianNATSKeepsTheStream(t *testing.T) {
	needDebian(t)
	if !debianTooOld {
		t.Skipf("nats-server %s keeps stream metadata: no stream without marks to move on from", debianVersion)
	}
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	old, url := e2eproc.StartNATSServer(t, dir, "debian-nats", debianBin, store, false)
	s := newStack(t)

	// The stream as a ticketrelay made it there: its marks dropped.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := e2eproc.JetStream(t, url)
	c := natsjs.StreamConfig{Installation: installation.Name(installationName), Owner: "a-ledger-of-before"}.WithDefaults()
	st, err := js.CreateStream(ctx, c.Definition())
	if err != nil {
		t.Fatal(err)
	}
	if md := st.CachedInfo().Config.Metadata; md[natsjs.MetaInstallation] != "" {
		t.Fatalf("nats-server %s kept the marks (%v): the case this test moves on from does not arise", debianVersion, md)
	}
	created := st.CachedInfo().Created
	s.create(t, "filed-while-refused")
	checkRefusal(t, "on the old server", s.refusedDispatcher(t, url))
	old.Stop(t)

	// Upgraded: the module's nats-server on the same store.
	_, url = e2eproc.StartNATSServer(t, dir, "upgraded-nats", moduleNATSBin, store, true)
	d := s.startDispatcher(t, url)
	s.waitDelivered(t, "filed-while-refused")
	js = e2eproc.JetStream(t, url)
	info, err := js.Stream(ctx, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	if md := info.CachedInfo().Config.Metadata; md[natsjs.MetaInstallation] != installationName || md[natsjs.MetaOwner] == "" {
		t.Errorf("the stream taken after the upgrade carries %v, want its marks", md)
	}
	if got := info.CachedInfo().Created; !got.Equal(created) {
		t.Errorf("the stream was created again at %s (first %s): want the stream of before, taken", got, created)
	}
	d.Stop(t)
	s.startDispatcher(t, url)
	s.create(t, "after-the-upgrade")
	s.waitDelivered(t, "after-the-upgrade")
	if n := s.delivered(t, "filed-while-refused"); n != 1 {
		t.Errorf("the ticket filed while refused was delivered %d times", n)
	}
}
