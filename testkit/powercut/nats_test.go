package powercut_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/store/outbox"
	"ticketrelay/testkit/powercut"
)

// childNATS runs a nats-server with JetStream on POWERCUT_STORE and prints
// "url <client URL>" once it accepts clients; it runs until killed (or,
// as a bound, for ten minutes). POWERCUT_SYNC=always is the dispatcher's
// embedded server as ticketrelay starts it (natsjs.StartEmbedded:
// sync_interval always); POWERCUT_SYNC=lazy is the same server with
// nats-server's default, a sync every two minutes.
func childNATS() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store := os.Getenv("POWERCUT_STORE")
	var s *server.Server
	var err error
	switch mode := os.Getenv("POWERCUT_SYNC"); mode {
	case "always":
		s, err = natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: store}, log)
	case "lazy":
		s, err = server.NewServer(&server.Options{
			ServerName: "powercut-lazy",
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   store,
			NoSigs:     true,
		})
		if err == nil {
			s.Start()
			if !s.ReadyForConnections(30 * time.Second) {
				err = errors.New("not ready after 30s")
			}
		}
	default:
		err = fmt.Errorf("POWERCUT_SYNC=%q", mode)
	}
	if err != nil {
		log.Error("nats child", "err", err)
		return 1
	}
	fmt.Fprintf(os.Stdout, "url %s\n", s.ClientURL())
	time.Sleep(10 * time.Minute) // a bound only: the parent SIGKILLs it
	return 0
}

// natsServer starts the child on store and connects to it.
func natsServer(t *testing.T, store, sync string) (*child, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	c := startChild(t, "nats", "POWERCUT_STORE="+store, "POWERCUT_SYNC="+sync)
	url, ok := strings.CutPrefix(c.next(t, time.Minute), "url ")
	if !ok {
		t.Fatal("nats child did not print its URL")
	}
	nc, err := nats.Connect(url, nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return c, nc, js
}

// publishUntil publishes ticketrelay's messages (one Nats-Msg-Id each) from
// 8 concurrent publishers, each waiting for its PubAck, until want are
// acknowledged; then it SIGKILLs the server with publishes in flight. It
// returns every acknowledged message: Nats-Msg-Id → stream sequence.
func publishUntil(t *testing.T, c *child, js jetstream.JetStream, prefix string, want int) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type ack struct {
		id  string
		seq uint64
	}
	acks := make(chan ack, 1<<16)
	var wg sync.WaitGroup
	for p := range 8 {
		wg.Go(func() {
			for i := range 100_000 { // bounded; the kill ends it long before
				id := fmt.Sprintf("%s-p%d-%06d", prefix, p, i)
				m := &nats.Msg{Subject: outbox.SubjectFor("local"), Data: []byte(`{"ticket":"` + id + `"}`), Header: nats.Header{}}
				m.Header.Set(jetstream.MsgIDHeader, id)
				pa, err := js.PublishMsg(ctx, m)
				if err != nil {
					return // the server was killed (or the test timed out)
				}
				acks <- ack{id, pa.Sequence}
			}
		})
	}
	got := map[string]uint64{}
	for len(got) < want {
		select {
		case a := <-acks:
			got[a.id] = a.seq
		case <-ctx.Done():
			t.Fatalf("%d of %d publishes acknowledged before the deadline", len(got), want)
		}
	}
	c.kill()
	wg.Wait()
	close(acks)
	for a := range acks {
		got[a.id] = a.seq
	}
	return got
}

// lostMessages restarts nothing: it asks the running server for each
// acknowledged message by its sequence and returns those not there (or not
// the same message).
func lostMessages(t *testing.T, js jetstream.JetStream, acked map[string]uint64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, "TICKETS")
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		lost := make([]string, 0, len(acked))
		for id := range acked {
			lost = append(lost, id)
		}
		return lost
	}
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for id, seq := range acked {
		m, err := s.GetMsg(ctx, seq)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			lost = append(lost, id)
		case err != nil:
			t.Fatalf("get %d: %v", seq, err)
		case m.Header.Get(jetstream.MsgIDHeader) != id:
			lost = append(lost, id)
		}
	}
	return lost
}

// TestJetStreamSyncAlwaysSurvivesPowerCut: the dispatcher's embedded
// server (sync_interval always) keeps every acknowledged message through a
// SIGKILL and a power cut, three times over, and starts on what the cut left.
func TestJetStreamSyncAlwaysSurvivesPowerCut(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	store := filepath.Join(pc.Mountpoint(), "nats")
	acked := map[string]uint64{}
	for round := range 4 {
		c, _, js := natsServer(t, store, "always")
		if round > 0 {
			if lost := lostMessages(t, js, acked); len(lost) > 0 {
				t.Fatalf("round %d: %d of %d acknowledged messages lost by the cut (e.g. %v)", round, len(lost), len(acked), lost[:min(5, len(lost))])
			}
			t.Logf("after cut %d: all %d acknowledged messages present", round, len(acked))
		}
		if round == 3 {
			c.kill()
			break
		}
		if _, err := natsjs.EnsureStream(context.Background(), js, natsjs.StreamConfig{}); err != nil {
			t.Fatalf("round %d: EnsureStream: %v", round, err)
		}
		// As the dispatcher does after creating the stream.
		if err := natsjs.SyncStoreDirs(store); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got := publishUntil(t, c, js, fmt.Sprintf("r%d", round), 1000)
		elapsed := time.Since(start)
		for id, seq := range got {
			acked[id] = seq
		}
		if err := pc.Cut(); err != nil {
			t.Fatal(err)
		}
		st := pc.Stats()
		t.Logf("round %d: %d acknowledged (1000 in %s); fsyncs %d files / %d directories so far; cut: %+v",
			round, len(got), elapsed.Round(time.Millisecond), st.FileSyncs, st.DirSyncs, st.LastCut)
	}
}

// TestJetStreamLazySyncLosesAcknowledged shows that the filesystem can fail
// the test above: the same server with nats-server's default sync (every two
// minutes) acknowledges messages it has not synced, and a cut right after
// loses them (Jepsen's finding on NATS 2.12.1, with LazyFS).
func TestJetStreamLazySyncLosesAcknowledged(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	store := filepath.Join(pc.Mountpoint(), "nats")
	c, _, js := natsServer(t, store, "lazy")
	if _, err := natsjs.EnsureStream(context.Background(), js, natsjs.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	// The same sequence as above: only the sync interval differs, so what
	// is lost is message data, not the stream's directories.
	if err := natsjs.SyncStoreDirs(store); err != nil {
		t.Fatal(err)
	}
	acked := publishUntil(t, c, js, "lazy", 1000)
	if err := pc.Cut(); err != nil {
		t.Fatal(err)
	}
	cs := pc.Stats().LastCut
	_, _, js = natsServer(t, store, "lazy")
	_, err := js.Stream(context.Background(), "TICKETS")
	t.Logf("lazy sync: after the cut the stream is recovered: %v (err %v)", err == nil, err)
	lost := lostMessages(t, js, acked)
	t.Logf("lazy sync: %d of %d acknowledged messages lost by the cut; cut: %+v", len(lost), len(acked), cs)
	if len(lost) == 0 {
		t.Fatalf("a server that does not sync before acknowledging lost nothing in a cut: the filesystem did not drop unsynced data")
	}
}
