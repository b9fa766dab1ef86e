package torture_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"ticketrelay/testkit/torture"
)

// powerCutSeed is the seed of the short power-cut runs: fixed, as
// shortSeed is, so that `make test` makes the same decisions every time.
const powerCutSeed = 20261202

// runPowerCut runs the short power-cut torture, or skips the test with one
// line where FUSE cannot be mounted.
func runPowerCut(t *testing.T, lazy bool) torture.Report {
	t.Helper()
	if testing.Short() {
		t.Skip("the power-cut torture run takes about 25 s; skipped with -short")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil || os.Geteuid() != 0 {
		t.Skipf("power-cut torture: needs /dev/fuse and root to mount FUSE (euid %d, /dev/fuse: %v)", os.Geteuid(), err)
	}
	seed := uint64(powerCutSeed)
	if s := os.Getenv("TORTURE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TORTURE_SEED=%q: %v", s, err)
		}
		seed = v
	}
	torture.ReplayCommand = func(c torture.Config) string {
		return fmt.Sprintf("TORTURE_SEED=%d go test -race -count=1 -run %s ./testkit/torture/", c.Seed, t.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := torture.Run(ctx, torture.Config{
		FrontBin: frontBin, DispatcherBin: dispatcherBin, NATSBin: natsBin, Dir: t.TempDir(),
		Seed: seed, Callers: 6, Duration: 15 * time.Second, Kills: 3,
		Settle: 20 * time.Second, Grace: 15 * time.Second, PowerCut: true, LazyNATS: lazy,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENODEV) {
		t.Skipf("power-cut torture: mounting FUSE is not permitted here: %v", err)
	}
	if err != nil {
		t.Fatalf("power-cut torture run (seed %d): %v", rep.Seed, err)
	}
	for _, l := range rep.Lines() {
		t.Log(l)
	}
	if rep.PowerCut == nil {
		t.Fatal("the report of a power-cut run has no power-cut record")
	}
	return rep
}

// TestTorturePowerCutShort is the bounded power-cut run of `make test`: the
// data directory and the external nats-server's store (sync_interval:
// always) on a power-cut mount, 6 callers × 12 requests over 15 s of faults,
// and 3 power cuts of the whole system. Every property holds: nothing
// acknowledged is lost, nothing delivered is sent again, the stream keeps
// every message it acknowledged.
func TestTorturePowerCutShort(t *testing.T) {
	rep := runPowerCut(t, false)
	if !rep.OK() {
		t.Errorf("a property was violated; seed %d; replay: %s", rep.Seed, rep.Replay)
	}
	pc, c := rep.PowerCut, rep.Result.Counts
	switch {
	case len(pc.Cuts) != 3:
		t.Errorf("%d power cuts, want 3", len(pc.Cuts))
	case pc.Acked == 0 || pc.Cuts[0].Acked == 0:
		t.Errorf("no request was acknowledged before the first cut: %+v", pc.Cuts)
	case len(pc.DeliveredAt) == 0:
		t.Errorf("no request was delivered before a cut: nothing checked for redelivery")
	case pc.StreamChecked == 0:
		t.Errorf("no published message was looked up in the stream at the end")
	case c.Kills[torture.CompNATS] != 3 || c.Kills[torture.CompDispatcher] != 3 || c.Kills[torture.CompFront] != 3:
		t.Errorf("not every process was killed at every cut: %s", c)
	case c.Cuts == 0 || c.Timeouts == 0 || c.Delivered == 0:
		t.Errorf("the load injected no cut or timeout, or nothing was delivered: %s", c)
	}
}

// TestTorturePowerCutLazyNATSShort is the same run against a nats-server
// without sync_interval: always: the check must fail where the broker
// broke its promise (stream-durable: it lost messages it had acknowledged),
// and every other property must hold, because the dispatcher's audit found
// the messages lost before their delivery and published them again.
func TestTorturePowerCutLazyNATSShort(t *testing.T) {
	rep := runPowerCut(t, true)
	pc := rep.PowerCut
	for _, p := range rep.Result.Properties {
		if p.OK != (p.Name != "stream-durable") {
			t.Errorf("%s: OK=%t; against a lazy nats-server only stream-durable should fail (seed %d; replay: %s)", p.Name, p.OK, rep.Seed, rep.Replay)
		}
	}
	pending := 0
	for _, p := range pc.StreamLost {
		if p {
			pending++
		}
	}
	switch {
	case len(pc.Cuts) != 3:
		t.Errorf("%d power cuts, want 3", len(pc.Cuts))
	case len(pc.StreamLost) == 0:
		t.Error("the lazy nats-server lost no acknowledged message: the run cannot tell a synced stream from a lazy one")
	case pending == 0:
		t.Error("no message was lost before its delivery: the audit's recovery went untested")
	}
}
