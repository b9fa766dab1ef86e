package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"ticketrelay/internal/failpoint"
)

// NATS faults of a multi-host run, one at a time so that two nodes of
// three always form a quorum once the fault is over.
const (
	natsKill        = "kill"      // SIGKILL, restarted on the same store
	natsStop        = "stop"      // SIGSTOP, then SIGCONT
	natsPartition   = "partition" // its routes cut, then healed
	natsStreamFault = "stream"    // the stream deleted or purged (natsFault.at says which)
)

// Targets of a NATS fault besides a node by name.
const (
	atStreamLeader = "stream-leader"
	atKVLeader     = "bucket-leader"
)

type natsFault struct{ kind, at string }

// natsPlan is the seeded order of the NATS faults: both leaders killed
// and stopped, a route cut, then every node killed and stopped and the
// stream deleted and purged, then at random. A run does as many as fit in
// its fault phase.
func natsPlan(rng *rand.Rand, n int) []natsFault {
	plan := []natsFault{{natsKill, atStreamLeader}, {natsStop, atKVLeader}, {natsPartition, ""}, {natsKill, atKVLeader}, {natsStop, atStreamLeader}}
	var each []natsFault
	for i := range 3 {
		each = append(each, natsFault{natsKill, fmt.Sprint(i)}, natsFault{natsStop, fmt.Sprint(i)})
	}
	each = append(each, natsFault{natsStreamFault, StreamDelete}, natsFault{natsStreamFault, StreamPurge})
	rng.Shuffle(len(each), func(i, j int) { each[i], each[j] = each[j], each[i] })
	plan = append(plan, each...)
	kinds := []string{natsKill, natsStop, natsPartition}
	ats := []string{atStreamLeader, atKVLeader, "0", "1", "2"}
	for len(plan) < n {
		plan = append(plan, natsFault{kinds[rng.IntN(len(kinds))], ats[rng.IntN(len(ats))]})
	}
	return plan[:n]
}

// nodePlan is the seeded order of a run with node faults only: the
// bucket's leader stopped and killed first (the faults that made live
// hosts look lost), then SIGSTOP or SIGKILL of a leader or a node at
// random.
func nodePlan(rng *rand.Rand, n int) []natsFault {
	plan := []natsFault{{natsStop, atKVLeader}, {natsKill, atKVLeader}}
	kinds := []string{natsKill, natsStop}
	ats := []string{atKVLeader, atKVLeader, atStreamLeader, "0", "1", "2"}
	for len(plan) < n {
		plan = append(plan, natsFault{kinds[rng.IntN(len(kinds))], ats[rng.IntN(len(ats))]})
	}
	return plan[:n]
}

// mhScheduler drives the faults of a multi-host run on two tracks: the
// NATS cluster, and the hosts' processes (with the removal of one host for
// good half way through).
type mhScheduler struct {
	cl    *mhCluster
	proxy *hostProxy
	cfg   Config

	natsRNG, hostRNG *rand.Rand
	budget           int // failpoint arms left

	dispatcherArms int
	claimKilled    bool // a front armed with front.after-claim has died of it
	lost           *mhHost
	lostSnap       Snapshot
}

// runNATS applies the NATS faults, evenly spread over the fault phase.
func (s *mhScheduler) runNATS(ctx, faults context.Context, d time.Duration) error {
	n := max(3, int(d/(8*time.Second)))
	plan := natsPlan(s.natsRNG, n)
	if s.cfg.NodeFaultsOnly {
		n = max(3, int(d/(15*time.Second)))
		plan = nodePlan(s.natsRNG, n)
	}
	start := time.Now()
	slot := d / time.Duration(n+1)
	for i, f := range plan {
		at := start.Add(slot*time.Duration(i) + slot/2)
		select {
		case <-faults.Done():
			return nil
		case <-time.After(time.Until(at)):
		}
		if f.kind == natsStreamFault {
			streamFault(ctx, s.cl.nats.ClientURLs(), s.cl.h, s.cl.log, f.at)
			continue
		}
		hold := 1500*time.Millisecond + time.Duration(s.natsRNG.Int64N(int64(2*time.Second)))
		if s.cfg.NodeFaultsOnly {
			// Several heartbeat periods, as issue #38 measured them.
			hold = 4*time.Second + time.Duration(s.natsRNG.Int64N(int64(3*time.Second)))
		}
		if err := s.natsFault(ctx, f, hold); err != nil {
			return err
		}
	}
	return nil
}

// natsFault applies f for hold, undoes it and waits until the cluster is
// whole again.
func (s *mhScheduler) natsFault(ctx context.Context, f natsFault, hold time.Duration) error {
	nc := s.cl.nats
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	node, what := -1, ""
	var err error
	switch f.at {
	case atStreamLeader:
		node, err = nc.StreamLeader(qctx, s.cl.inst.Stream())
		what = "stream leader"
	case atKVLeader:
		node, err = nc.KVLeader(qctx, s.cl.inst.Bucket())
		what = "bucket leader"
	case "":
		node = s.natsRNG.IntN(nc.Size())
	default:
		fmt.Sscan(f.at, &node)
	}
	if err != nil {
		return fmt.Errorf("torture: %s: %w", what, err)
	}
	detail := nc.Name(node)
	if what != "" {
		detail += " (" + what + ")"
	}
	switch f.kind {
	case natsKill:
		if err := nc.Kill(node); err != nil {
			return err
		}
		s.cl.h.add(Event{Kind: KindKill, Component: CompNATS, Cause: CauseScheduler, Detail: detail})
	case natsStop:
		if err := nc.Stop(node); err != nil {
			return err
		}
		s.cl.h.add(Event{Kind: KindFault, Component: CompNATS, Cause: CauseSIGSTOP, Detail: detail})
	case natsPartition:
		if err := nc.Partition(node); err != nil {
			return err
		}
		s.cl.h.add(Event{Kind: KindFault, Component: CompNATS, Cause: CausePartition, Detail: detail})
	}
	s.cl.log.Info("nats fault", "fault", f.kind, "node", detail, "hold", hold)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(hold):
	}
	switch f.kind {
	case natsKill:
		err = nc.Restart(ctx, node)
	case natsStop:
		err = nc.Cont(node)
	case natsPartition:
		err = nc.Heal(node)
	}
	if err != nil {
		return fmt.Errorf("torture: undo %s of %s: %w", f.kind, detail, err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 90*time.Second)
	defer rcancel()
	if err := nc.WaitReady(rctx); err != nil {
		return fmt.Errorf("torture: after %s of %s: %w", f.kind, detail, err)
	}
	return nil
}

// runHosts kills the hosts' processes at random moments and restarts them
// (maybe with a failpoint armed, front.after-claim among them), restarts
// a process a failpoint killed, and removes the last host for good half
// way through: its dispatcher first (Config.LostOutboxFor before), so that
// its front accepts requests it never publishes, then its front and its
// data directory.
func (s *mhScheduler) runHosts(ctx, faults context.Context, d time.Duration) error {
	start := time.Now()
	kills := max(2, s.cfg.Kills)
	interval := d / time.Duration(kills+1)
	at := make([]time.Time, kills)
	for i := range at {
		jitter := time.Duration(s.hostRNG.Int64N(int64(interval)*2/3+1)) - interval/3
		at[i] = start.Add(interval*time.Duration(i+1) + jitter)
	}
	// The front first, so that front.after-claim is armed early.
	comps := []string{CompFront, CompDispatcher}
	for len(comps) < kills {
		comps = append(comps, []string{CompFront, CompDispatcher}[s.hostRNG.IntN(2)])
	}
	loseAt := start.Add(d / 2)
	loseDispatcherAt := loseAt.Add(-s.cfg.LostOutboxFor)
	lost := s.cl.host(len(s.cl.hosts) - 1)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	next, step := 0, 0
	for {
		select {
		case <-faults.Done():
			return nil
		case <-tick.C:
		}
		for _, hc := range s.cl.reap() {
			if hc.comp == CompFront && strings.Contains(s.cl.armedOf(hc.h, hc.comp), failpoint.FrontAfterClaim) {
				s.claimKilled = true
			}
			if err := s.restart(ctx, hc.h, hc.comp, s.hostRNG.IntN(3) == 0); err != nil {
				return err
			}
		}
		switch {
		case step == 0 && time.Now().After(loseDispatcherAt):
			step++
			s.cl.kill(lost, CompDispatcher, CauseRemoved)
			continue
		case step == 1 && time.Now().After(loseAt):
			step++
			s.proxy.remove(lost.idx)
			snap, err := s.cl.remove(ctx, lost)
			if err != nil {
				return err
			}
			s.lost, s.lostSnap = lost, snap
			continue
		}
		if next < len(at) && time.Now().After(at[next]) {
			comp := comps[next]
			next++
			live := s.cl.live()
			if step == 1 {
				live = live[:len(live)-1] // the host being lost stays as it is
			}
			if next == 1 && len(live) > 1 && live[len(live)-1] == lost {
				// The first kill is a front's, restarted with front.after-claim
				// armed: on a host that stays, so that the failpoint fires
				// before its host is lost.
				live = live[:len(live)-1]
			}
			h := live[s.hostRNG.IntN(len(live))]
			s.cl.kill(h, comp, CauseScheduler)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(s.hostRNG.IntN(400)) * time.Millisecond):
			}
			if err := s.restart(ctx, h, comp, true); err != nil {
				return err
			}
		}
	}
}

// restart starts comp of h again, maybe with a failpoint armed: a front
// gets front.after-claim (claimed in the cluster record, not committed)
// until one has died of it, then two times in three, else
// front.after-commit; a dispatcher alternates between the relay's and the
// forwarder's.
func (s *mhScheduler) restart(ctx context.Context, h *mhHost, comp string, arm bool) error {
	if p := s.cl.proc(h, comp); p != nil && !p.Exited() {
		return nil
	}
	fp := ""
	if arm && s.budget > 0 {
		switch {
		case comp == CompFront && (!s.claimKilled || s.hostRNG.IntN(3) < 2):
			fp = fmt.Sprintf("%s=kill@%d", failpoint.FrontAfterClaim, 1+s.hostRNG.IntN(3))
		case comp == CompFront:
			fp = fmt.Sprintf("%s=kill@%d", failpoint.FrontAfterCommit, 1+s.hostRNG.IntN(6))
		case s.dispatcherArms%2 == 0:
			fp = fmt.Sprintf("%s=kill@%d", failpoint.RelayAfterPublish, 1+s.hostRNG.IntN(4))
			s.dispatcherArms++
		default:
			fp = fmt.Sprintf("%s=kill@%d", failpoint.ForwarderAfterDeliver, 1+s.hostRNG.IntN(6))
			s.dispatcherArms++
		}
		s.budget--
	}
	return s.cl.start(ctx, h, comp, fp)
}

// calm ends the faults: the cluster whole, every process of a live host
// running, none with a failpoint armed.
func (s *mhScheduler) calm(ctx context.Context) error {
	nc := s.cl.nats
	for i := range nc.Size() {
		if nc.Partitioned(i) {
			if err := nc.Heal(i); err != nil {
				return err
			}
		}
		if nc.Stopped(i) {
			if err := nc.Cont(i); err != nil {
				return err
			}
		}
		if !nc.Running(i) {
			if err := nc.Restart(ctx, i); err != nil {
				return err
			}
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := nc.WaitReady(rctx); err != nil {
		return err
	}
	if s.lost == nil {
		// The fault phase ended before the removal: remove it now, so that
		// every run checks it.
		lost := s.cl.host(len(s.cl.hosts) - 1)
		s.proxy.remove(lost.idx)
		snap, err := s.cl.remove(ctx, lost)
		if err != nil {
			return err
		}
		s.lost, s.lostSnap = lost, snap
	}
	s.cl.reap()
	for _, h := range s.cl.live() {
		for _, comp := range []string{CompDispatcher, CompFront} {
			p := s.cl.proc(h, comp)
			if p != nil && !p.Exited() && s.cl.armedOf(h, comp) != "" {
				s.cl.kill(h, comp, CauseDisarm)
			}
			if err := s.restart(ctx, h, comp, false); err != nil {
				return err
			}
		}
	}
	if _, err := os.Stat(s.lost.dir); err == nil {
		return fmt.Errorf("torture: the lost host's directory %s is still there", s.lost.dir)
	}
	return nil
}
