package torture_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"ticketrelay/testkit/torture"
)

// multiHostSeed is the seed of TestTortureMultiHost: fixed, so that `make
// test` makes the same fault decisions on every run. TORTURE_SEED runs
// another.
const multiHostSeed = 20261202

// TestTortureMultiHost is the bounded multi-host run of `make test`: two
// hosts behind the round-robin proxy on a 3-node NATS cluster, 4 callers
// over 45 s of faults (NATS leaders killed and stopped, a route cut, the
// hosts' processes killed, front.after-claim armed) with the second host
// lost for good half way, then every property checked.
func TestTortureMultiHost(t *testing.T) {
	if testing.Short() {
		t.Skip("the multi-host torture run takes about a minute and a half; skipped with -short")
	}
	seed := uint64(multiHostSeed)
	if s := os.Getenv("TORTURE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TORTURE_SEED=%q: %v", s, err)
		}
		seed = v
	}
	torture.MultiHostReplayCommand = func(c torture.Config) string {
		return fmt.Sprintf("TORTURE_SEED=%d go test -race -count=1 -run TestTortureMultiHost ./testkit/torture/", c.Seed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := torture.Run(ctx, torture.Config{
		FrontBin: frontBin, DispatcherBin: dispatcherBin, NATSBin: natsBin, Dir: t.TempDir(),
		Seed: seed, Hosts: 2, Callers: 4, Duration: 45 * time.Second, Kills: 5,
		Settle: 40 * time.Second, Grace: 20 * time.Second,
		// Less than -host-dead-after: the lost host is adopted once, after
		// its front is gone (see TestTortureMultiHostAdoptedHostAccepts).
		LostOutboxFor: 2 * time.Second,
		Log:           slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatalf("multi-host torture run (seed %d): %v", rep.Seed, err)
	}
	for _, l := range rep.Lines() {
		t.Log(l)
	}
	if !rep.OK() {
		t.Errorf("a property was violated; seed %d; replay: %s", rep.Seed, rep.Replay)
	}
	c, f := rep.Result.Counts, rep.Multi
	if f == nil {
		t.Fatal("a multi-host run reported no figures")
	}
	// The run must have exercised what it claims to.
	switch {
	case c.Requests < 40:
		t.Errorf("only %d requests: %s", c.Requests, c)
	case c.Comments == 0 || c.Updates == 0:
		t.Errorf("no comments or no updates across hosts: %s", c)
	case c.Accepted < c.Requests*9/10:
		t.Errorf("only %d of %d requests were seen accepted", c.Accepted, c.Requests)
	case f.ConflictsDetected == 0:
		t.Errorf("no conflict was detected: %s", f)
	case c.Kills["nats-server"] == 0 || len(f.Stops) == 0 || len(f.Cuts) == 0:
		t.Errorf("the NATS cluster was not killed, stopped and cut: %s", f)
	case f.Kills["h1/dispatcher"]+f.Kills["h2/dispatcher"] < 2 || f.Kills["h1/mcp-front"]+f.Kills["h2/mcp-front"] < 2:
		// The lost host's two processes, and at least one more of each.
		t.Errorf("the hosts' processes were not killed: %s", f)
	case f.FailpointKills["front.after-claim"] == 0:
		t.Errorf("no front was killed between its claim and its commit: %s", f)
	case f.LostRows == 0:
		t.Errorf("the lost host had accepted nothing: %s", f)
	case c.Delivered == 0:
		t.Errorf("nothing was delivered: %s", c)
	}
}

// TestTortureMultiHostAdoptedHostAccepts loses a host whose dispatcher
// died 10 s before it, with -host-dead-after 3s: the other host adopts it
// while its mcp-front still accepts requests, then it is lost for good.
// Every request it acknowledged must still be delivered.
func TestTortureMultiHostAdoptedHostAccepts(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-host torture run; skipped with -short")
	}
	torture.MultiHostReplayCommand = func(c torture.Config) string {
		return fmt.Sprintf("TORTURE_SEED=%d go test -race -count=1 -run TestTortureMultiHostAdoptedHostAccepts ./testkit/torture/", c.Seed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := torture.Run(ctx, torture.Config{
		FrontBin: frontBin, DispatcherBin: dispatcherBin, NATSBin: natsBin, Dir: t.TempDir(),
		Seed: multiHostSeed, Hosts: 2, Callers: 4, Duration: 30 * time.Second, Kills: 2,
		Settle: 30 * time.Second, Grace: 20 * time.Second, LostOutboxFor: 10 * time.Second,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatalf("multi-host torture run (seed %d): %v", rep.Seed, err)
	}
	for _, l := range rep.Lines() {
		t.Log(l)
	}
	if !rep.OK() {
		t.Errorf("a property was violated; seed %d; replay: %s", rep.Seed, rep.Replay)
	}
	if rep.Multi == nil || rep.Multi.LostRows == 0 {
		t.Errorf("the lost host had accepted nothing: %v", rep.Multi)
	}
}
