package e2eproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A nats-server as its own process, for the tests of ticketrelay against an
// external server of a given build: Debian's package (make
// test-debian-nats) or the module's pinned version; and a client of it.

// NATSServerVersion is the version bin says it is ("2.9.10").
func NATSServerVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", bin, err, out)
	}
	m := regexp.MustCompile(`v?(\d+\.\d+\.\d+\S*)`).FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s --version printed no version: %q", bin, out)
	}
	return string(m[1]), nil
}

// BuildNATSServer builds the nats-server of the module at root (its
// pinned version) into dir and returns its path.
func BuildNATSServer(root, dir string) (string, error) {
	out := filepath.Join(dir, "nats-server")
	build := exec.Command("go", "build", "-o", out, "github.com/nats-io/nats-server/v2")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building nats-server: %w", err)
	}
	return out, nil
}

// StartNATSServer runs bin with JetStream on the store store, on a free
// loopback port, and returns the process and its client URL; name names
// its log and configuration in dir. syncAlways adds sync_interval: always
// (which servers before 2.10 refuse). A server still running at the end of
// the test is stopped with SIGINT.
func StartNATSServer(t testing.TB, dir, name, bin, store string, syncAlways bool) (p *Proc, url string) {
	t.Helper()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	sync := ""
	if syncAlways {
		sync = "  sync_interval: always\n"
	}
	conf := filepath.Join(dir, name+".conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "listen: %q\njetstream {\n  store_dir: %q\n%s}\n", addr, store, sync), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = Launch(context.Background(), dir, Spec{Name: name, Bin: bin, Args: []string{"-c", conf}, TCPAddr: addr})
	if err != nil {
		DumpLog(t, name, filepath.Join(dir, name+".log"))
		t.Fatal(err)
	}
	p.stopAtEnd(t)
	return p, "nats://" + addr
}

// JetStream is a JetStream client of the server url, connected with opts,
// closed at the end of the test.
func JetStream(t testing.TB, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// StreamNames lists the streams of js's account, sorted.
func StreamNames(t testing.TB, js jetstream.JetStream) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := js.StreamNames(ctx)
	var names []string
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}
