package natsjs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
)

// The broker's credential: a user nkey seed made once, private, kept.
func TestSeedFileIsCreatedPrivateAndKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), natsjs.SeedFile)
	pub, err := natsjs.LoadOrCreateSeed(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pub, "U") {
		t.Fatalf("public key %q is not a user nkey", pub)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("seed file mode %#o, want 0600", fi.Mode().Perm())
	}
	again, err := natsjs.LoadOrCreateSeed(path)
	if err != nil || again != pub {
		t.Fatalf("second load = %q, %v; want the same key %q", again, err, pub)
	}

	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.LoadOrCreateSeed(path); !errors.Is(err, natsjs.ErrSeedExposed) {
		t.Fatalf("a group-readable seed file: err = %v, want ErrSeedExposed", err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "junk"), []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.LoadOrCreateSeed(filepath.Join(filepath.Dir(path), "junk")); err == nil {
		t.Fatal("a file without a seed was taken")
	}
}

// With Users set, the embedded server admits the seed's holder only: a
// client without credentials, or with another seed, is refused at connect
// and can neither read nor touch the stream.
func TestEmbeddedServerAdmitsOnlyTheSeed(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	seed := filepath.Join(dir, natsjs.SeedFile)
	pub, err := natsjs.LoadOrCreateSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	s, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "store"), Users: []string{pub}}, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })

	opt, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL(), opt)
	if err != nil {
		t.Fatalf("connect with the seed: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{}); err != nil {
		t.Fatalf("JetStream for the seed's holder: %v", err)
	}
	if _, err := js.PublishMsg(ctx, msgWithID("tickets.local", "req-1", "x")); err != nil {
		t.Fatal(err)
	}

	anon, err := nats.Connect(s.ClientURL(), nats.Timeout(5*time.Second))
	if err == nil {
		anon.Close()
		t.Fatal("an anonymous client was admitted")
	}
	if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("anonymous connect: %v, want an authorization violation", err)
	}

	other := filepath.Join(dir, "other.nk")
	if _, err := natsjs.LoadOrCreateSeed(other); err != nil {
		t.Fatal(err)
	}
	opt2, err := nats.NkeyOptionFromSeed(other)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := nats.Connect(s.ClientURL(), opt2, nats.Timeout(5*time.Second)); err == nil {
		c.Close()
		t.Fatal("a client with another seed was admitted")
	}
	for _, bad := range []nats.Option{nats.UserInfo("ticketrelay", "guess"), nats.Token("guess")} {
		if c, err := nats.Connect(s.ClientURL(), bad, nats.Timeout(5*time.Second)); err == nil {
			c.Close()
			t.Fatal("a client with a user/password or token was admitted")
		}
	}
}
