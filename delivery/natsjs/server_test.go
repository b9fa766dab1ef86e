package natsjs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/testkit/e2eproc"
)

func TestOlderThanMin(t *testing.T) {
	for v, want := range map[string]bool{
		"2.9.10": true, "2.9.25": true, "2.2.0": true, "1.4.1": true, "v2.9.0": true,
		"2.10.0": false, "2.10.0-beta.3": false, "2.11.1": false, "2.15.2": false, "v2.12.0-RC.1": false, "3.0.0": false,
		// Unreadable: the check of the marks decides.
		"": false, "2": false, "x.y.z": false,
	} {
		if got := ServerVersionTooOld(v); got != want {
			t.Errorf("ServerVersionTooOld(%q) = %v, want %v", v, got, want)
		}
	}
}

// debianNATSEnv names the nats-server binary of Debian's package (make
// test-debian-nats sets it); unset, the test skips.
const debianNATSEnv = "TICKETRELAY_DEBIAN_NATS"

// Against the real nats-server of Debian's package: a server older than
// 2.10 is refused before anything is written, naming its version and the
// minimum; and the check of the marks after the write refuses it too, for
// a server that announces a newer version than the node that keeps the
// stream. A newer package gets its marks kept.
func TestDebianNATSServer(t *testing.T) {
	bin := os.Getenv(debianNATSEnv)
	if bin == "" {
		t.Skip(debianNATSEnv + " is unset: this test needs Debian's nats-server (make test-debian-nats installs it)")
	}
	version, err := e2eproc.NATSServerVersion(bin)
	if err != nil {
		t.Fatal(err)
	}
	old := ServerVersionTooOld(version)
	dir := t.TempDir()
	_, url := e2eproc.StartNATSServer(t, dir, "debian-nats", bin, filepath.Join(dir, "store"), !old)
	js := e2eproc.JetStream(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := StreamConfig{Installation: "deb", Owner: "ledger-1"}.WithDefaults()
	st, err := EnsureStream(ctx, js, c)
	t.Logf("nats-server %s: %v", version, err)
	if !old {
		if err != nil {
			t.Fatalf("nats-server %s: %v", version, err)
		}
		if md := st.CachedInfo().Config.Metadata; md[MetaInstallation] != "deb" || md[MetaOwner] != "ledger-1" {
			t.Fatalf("nats-server %s kept the marks as %v", version, md)
		}
		return
	}
	if !errors.Is(err, ErrServerTooOld) || !strings.Contains(err.Error(), "nats-server "+version) ||
		!strings.Contains(err.Error(), "2.10 or later") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("nats-server %s: %v; want one line of ErrServerTooOld naming the version and 2.10", version, err)
	}
	if names := e2eproc.StreamNames(t, js); len(names) != 0 {
		t.Fatalf("the refused server got streams %v", names)
	}
	_, err = ensureStream(ctx, js, c)
	if !errors.Is(err, ErrServerTooOld) || !strings.Contains(err.Error(), "did not keep the metadata") {
		t.Fatalf("nats-server %s, its version not checked: %v; want ErrServerTooOld for the dropped marks", version, err)
	}
}
