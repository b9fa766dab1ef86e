package torture

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Config describes one run. Zero fields take the documented defaults.
type Config struct {
	// FrontBin, DispatcherBin and NATSBin are the paths of the mcp-front,
	// dispatcher and nats-server binaries. Required: Run builds nothing.
	FrontBin, DispatcherBin, NATSBin string
	// Dir holds everything of the run: data, logs, the config file and the
	// history (history.jsonl). Required; it should be empty.
	Dir string
	// Seed drives every random decision of the harness. 0: chosen from the
	// clock (and reported, so the run can be replayed).
	Seed uint64
	// Callers is the number of concurrent MCP callers. Default 6.
	Callers int
	// Requests is the number of requests of each caller; 0 means as many as
	// fit in Duration.
	Requests int
	// Duration is the length of the fault phase. Default 20s.
	Duration time.Duration
	// Kills is the number of SIGKILLs the scheduler sends during the fault
	// phase, spread over it (failpoint kills come on top). Default one per 5s.
	Kills int
	// StreamFaults is the number of times the scheduler deletes or purges
	// the stream (in turn, deletion first) during the fault phase, as
	// anyone who reaches the broker's API could: the dispatcher must put
	// it back and publish again what it lost, under load and between the
	// kills. Default one per 30s of Duration; negative: none. One-host
	// runs without PowerCut only.
	StreamFaults int
	// FaultRate is the share of create requests a fake answers with a
	// fault while faults run. Default 0.25; negative: none.
	FaultRate float64
	// Grace bounds how long callers keep retrying after the faults stop.
	// Default 30s.
	Grace time.Duration
	// Settle bounds the wait for every accepted request to settle after the
	// callers are done. Default 60s.
	Settle time.Duration
	// PowerCut runs the power-cut mode (see powercut.go): the data directory
	// and the nats-server's store live on an testkit/powercut mount, and
	// each of the Kills is a power cut of the whole system (every process
	// SIGKILLed together, then the mount cut) instead of one process's
	// kill. It needs /dev/fuse and root, and the program must call
	// ChildMain first (the harness reads SQLite in a child process).
	PowerCut bool
	// LazyNATS (with PowerCut) runs the nats-server without
	// sync_interval: always, with its default two-minute sync: a cut then
	// loses acknowledged messages, which the dispatcher's stream audit must
	// find and publish again.
	LazyNATS bool
	// Log receives the harness's progress (nil: discarded).
	Log *slog.Logger
	// Hosts, 2 or 3, makes the run multi-host: that many hosts of one
	// installation on a 3-node NATS cluster behind a round-robin proxy, one
	// of them lost for good half way (mhrun.go). 0: one host.
	Hosts int
	// HostDeadAfter is the hosts' -host-dead-after in a multi-host run.
	// Default 3s.
	HostDeadAfter time.Duration
	// LostOutboxFor is how long the lost host's front keeps accepting with
	// its dispatcher already dead, before the host is removed: what it
	// accepts then is in no stream. Default Duration/10.
	LostOutboxFor time.Duration
	// NodeFaultsOnly (with Hosts) makes the fault phase NATS node faults
	// only: the bucket's or the stream's leader, or any node, SIGSTOPped
	// or SIGKILLed for 4–7 s at a time (several heartbeat periods), one at
	// a time so that quorum is kept, and no host fault. The checker then
	// also holds that no live host was adopted and that acceptance never
	// stopped longer than FailoverBound. The host lost for good is removed
	// after the fault phase.
	NodeFaultsOnly bool
}

// FailoverBound is the longest a NATS node fault that keeps quorum may stop
// acceptance: the bucket's election (docs/operations.md).
const FailoverBound = 10 * time.Second

// withDefaults returns c with every zero field set.
func (c Config) withDefaults() Config {
	c.Callers = cmp.Or(c.Callers, 6)
	c.Duration = cmp.Or(c.Duration, 20*time.Second)
	if c.Kills == 0 {
		c.Kills = max(1, int(c.Duration/(5*time.Second)))
	}
	if c.StreamFaults == 0 {
		c.StreamFaults = max(1, int(c.Duration/(30*time.Second)))
	}
	if c.FaultRate == 0 {
		c.FaultRate = 0.25
	}
	c.Grace = cmp.Or(c.Grace, 30*time.Second)
	c.Settle = cmp.Or(c.Settle, 60*time.Second)
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	for name, v := range map[string]string{"FrontBin": c.FrontBin, "DispatcherBin": c.DispatcherBin, "NATSBin": c.NATSBin, "Dir": c.Dir} {
		if v == "" {
			errs = append(errs, fmt.Errorf("torture: %s is required", name))
		}
	}
	if c.LazyNATS && !c.PowerCut {
		errs = append(errs, errors.New("torture: LazyNATS needs PowerCut"))
	}
	if c.Callers < 1 || c.Requests < 0 || c.Duration < time.Second || c.Kills < 0 || c.FaultRate > 1 {
		errs = append(errs, fmt.Errorf("torture: invalid config: callers %d, requests %d, duration %s, kills %d, fault rate %g",
			c.Callers, c.Requests, c.Duration, c.Kills, c.FaultRate))
	}
	return errors.Join(errs...)
}
