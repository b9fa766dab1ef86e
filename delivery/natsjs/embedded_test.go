package natsjs_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/natsjs"
)

// The embedded nats-server: a synced file store that keeps its dedupe map
// across a restart, and its listen address checked up front.

func TestEmbeddedServerSyncsAndKeepsDedupeAcrossRestart(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	s, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: dir}, discard())
	if err != nil {
		t.Fatal(err)
	}
	jc := s.JetStreamConfig()
	if jc == nil || !jc.SyncAlways {
		t.Fatalf("JetStream config %+v: want SyncAlways", jc)
	}
	if jc.StoreDir == "" || !s.JetStreamEnabled() {
		t.Fatalf("JetStream not on a file store: %+v", jc)
	}
	if s.Addr() == nil || s.Addr().String() == "127.0.0.1:0" {
		t.Fatalf("listening on %v", s.Addr())
	}
	nc, js := connect(t, s)
	if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if a, err := js.PublishMsg(ctx, msgWithID("tickets.local", "req-X", "x")); err != nil || a.Duplicate {
		t.Fatalf("publish X = %+v, %v", a, err)
	}
	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()

	s2 := start(t, dir)
	_, js2 := connect(t, s2)
	st, err := natsjs.EnsureStream(ctx, js2, natsjs.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := js2.PublishMsg(ctx, msgWithID("tickets.local", "req-X", "x again"))
	if err != nil {
		t.Fatal(err)
	}
	if !a.Duplicate {
		t.Fatalf("after a restart, republishing X was stored again (%+v): the dedupe map was lost", a)
	}
	if a, err := js2.PublishMsg(ctx, msgWithID("tickets.local", "req-Y", "y")); err != nil || a.Duplicate {
		t.Fatalf("publish Y = %+v, %v", a, err)
	}
	if n := streamMsgs(t, ctx, st); n != 2 {
		t.Fatalf("stream holds %d messages, want 2", n)
	}
}

func TestStartEmbeddedRejectsBadListen(t *testing.T) {
	for _, listen := range []string{"127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", "127.0.0.1:-1"} {
		s, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: listen, StoreDir: t.TempDir()}, discard())
		if err == nil {
			s.Shutdown()
			t.Errorf("StartEmbedded(%q) started a server", listen)
		}
	}
}

// A port in use is an error at once, naming the listen error, not a 30 s
// wait for a server that never gets ready.
func TestStartEmbeddedPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	began := time.Now()
	s, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: ln.Addr().String(), StoreDir: t.TempDir()}, discard())
	if err == nil {
		s.Shutdown()
		t.Fatalf("StartEmbedded on %s, a port in use, started a server", ln.Addr())
	}
	// It fails in milliseconds. The bound only has to tell that from the
	// 30 s wait for readiness (natsjs.readyTimeout) it must not sit out,
	// so it is wide enough for a loaded machine.
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("StartEmbedded took %s to fail: it waited for a server that could never get ready", took)
	}
	if !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("error %q does not name the address and the listen error", err)
	}
}
