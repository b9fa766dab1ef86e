package natsjs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/installation"
)

// Installations on one server get streams of their own, marked as theirs;
// a stream of another installation, of another single host, or not made by
// ticketrelay is refused and left as it is.
func TestEnsureStreamKeepsInstallationsApart(t *testing.T) {
	ctx := ctxT(t)
	_, js := connect(t, start(t, t.TempDir()))
	a := natsjs.StreamConfig{Installation: "a", Owner: "ledger-a"}
	b := natsjs.StreamConfig{Installation: "b", Owner: "ledger-b"}
	sa, err := natsjs.EnsureStream(ctx, js, a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := natsjs.EnsureStream(ctx, js, b)
	if err != nil {
		t.Fatal(err)
	}
	ia, ib := sa.CachedInfo().Config, sb.CachedInfo().Config
	if ia.Name == ib.Name || ia.Subjects[0] == ib.Subjects[0] {
		t.Fatalf("installations share a stream or subjects: %s %v / %s %v", ia.Name, ia.Subjects, ib.Name, ib.Subjects)
	}
	if ia.Metadata[natsjs.MetaInstallation] != "a" || ia.Metadata[natsjs.MetaOwner] != "ledger-a" {
		t.Errorf("stream of a carries %v", ia.Metadata)
	}
	// Its own stream again: fine, and its messages stay.
	if _, err := js.Publish(ctx, installation.Name("a").Subject("local"), []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if s, err := natsjs.EnsureStream(ctx, js, a); err != nil || s.CachedInfo().State.Msgs != 1 {
		t.Fatalf("EnsureStream of its own stream again: %v", err)
	}
	// A second host with a ledger of its own, same installation: refused.
	other := a
	other.Owner = "ledger-c"
	if _, err := natsjs.EnsureStream(ctx, js, other); !errors.Is(err, natsjs.ErrForeignStream) ||
		!strings.Contains(err.Error(), "ledger-a") || !strings.Contains(err.Error(), "-installation") {
		t.Fatalf("a second host on a single-host installation's stream: %v, want ErrForeignStream naming the owner", err)
	}
	// Multi-host hosts never take a single host's stream, nor it theirs.
	cluster := a
	cluster.Owner = natsjs.OwnerCluster
	if _, err := natsjs.EnsureStream(ctx, js, cluster); !errors.Is(err, natsjs.ErrForeignStream) {
		t.Fatalf("a multi-host dispatcher on a single host's stream: %v", err)
	}
	// A stream of that name that ticketrelay did not make.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: installation.Name("d").Stream(), Subjects: []string{"other.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{Installation: "d"}); !errors.Is(err, natsjs.ErrForeignStream) {
		t.Fatalf("a stream ticketrelay did not make: %v", err)
	}
	// Another team's stream that takes every subject: overlap, refused.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVERYTHING", Subjects: []string{"ticketrelay.e.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{Installation: "e"}); !errors.Is(err, natsjs.ErrForeignStream) {
		t.Fatalf("subjects overlapping another stream: %v", err)
	}
	// Nothing refused was changed.
	if s, err := js.Stream(ctx, ia.Name); err != nil || s.CachedInfo().Config.Metadata[natsjs.MetaOwner] != "ledger-a" || s.CachedInfo().State.Msgs != 1 {
		t.Errorf("the refused calls changed stream a: %v", err)
	}
}

// The embedded server's installation takes the unmarked stream a
// ticketrelay from before installations made, and marks it.
func TestEnsureStreamAdoptsTheEmbeddedStreamOfBefore(t *testing.T) {
	ctx := ctxT(t)
	_, js := connect(t, start(t, t.TempDir()))
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TICKETS", Subjects: []string{"tickets.>"},
		Duplicates: natsjs.StreamConfig{}.WithDefaults().Duplicates, MaxAge: natsjs.StreamConfig{}.WithDefaults().MaxAge}); err != nil {
		t.Fatal(err)
	}
	s, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{Owner: "ledger-1"})
	if err != nil {
		t.Fatal(err)
	}
	if md := s.CachedInfo().Config.Metadata; md[natsjs.MetaOwner] != "ledger-1" {
		t.Errorf("adopted stream carries %v", md)
	}
}

// The stream a ticketrelay made on a nats-server older than 2.10, which
// dropped its marks, is taken on a server that keeps them, with its
// messages, and marked: from then on another host is refused. A stream of
// that name and subjects that ticketrelay did not describe is not.
func TestEnsureStreamTakesTheStreamWhoseMarksWereDropped(t *testing.T) {
	ctx := ctxT(t)
	_, js := connect(t, start(t, t.TempDir()))
	c := natsjs.StreamConfig{Installation: "old", Owner: "ledger-1"}.WithDefaults()
	asKept := c.Definition() // as nats-server 2.9 kept it
	asKept.Metadata, asKept.AllowAtomicPublish = nil, false
	if _, err := js.CreateStream(ctx, asKept); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, c.Installation.Subject("local"), []byte("undelivered")); err != nil {
		t.Fatal(err)
	}
	s, err := natsjs.EnsureStream(ctx, js, c)
	if err != nil {
		t.Fatalf("the stream made on a server that dropped its marks: %v", err)
	}
	info := s.CachedInfo()
	if md := info.Config.Metadata; md[natsjs.MetaInstallation] != "old" || md[natsjs.MetaOwner] != "ledger-1" {
		t.Errorf("taken stream carries %v", md)
	}
	if info.State.Msgs != 1 || !natsjs.AllowsAtomicBatches(s) {
		t.Errorf("taken stream: %d messages, atomic batches %v; want its message kept and its configuration ticketrelay's",
			info.State.Msgs, natsjs.AllowsAtomicBatches(s))
	}
	other := c
	other.Owner = "ledger-2"
	if _, err := natsjs.EnsureStream(ctx, js, other); !errors.Is(err, natsjs.ErrForeignStream) {
		t.Fatalf("another host on the stream once taken: %v, want ErrForeignStream", err)
	}

	look := natsjs.StreamConfig{Installation: "look"}.WithDefaults()
	alike := look.Definition()
	alike.Metadata, alike.AllowAtomicPublish, alike.Description = nil, false, "someone else's"
	if _, err := js.CreateStream(ctx, alike); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.EnsureStream(ctx, js, look); !errors.Is(err, natsjs.ErrForeignStream) {
		t.Fatalf("an unmarked stream ticketrelay did not describe: %v, want ErrForeignStream", err)
	}
	if st, err := js.Stream(ctx, look.Name); err != nil || st.CachedInfo().Config.Description != "someone else's" {
		t.Errorf("the refused stream was changed: %v", err)
	}
}
