package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/internal/failpoint"
)

// scheduler kills processes at random moments of the fault phase and
// restarts them, arming failpoints on some restarts. It also restarts a
// process that a failpoint killed, and deletes or purges the stream
// (streamFaults times, in turn) at moments of its own.
type scheduler struct {
	cl           *cluster
	rng          *rand.Rand
	kills        int
	streamFaults int
	budget       int // failpoint arms left, so crashes cannot cascade for ever

	dispatcherArms int
}

// run acts until faults ends; processes are (re)started under ctx.
func (s *scheduler) run(ctx, faults context.Context, d time.Duration) error {
	start := time.Now()
	// Every process early on (the dispatcher twice: its restarts arm the
	// relay's and the forwarder's failpoints), then at random.
	victims := []string{CompFront, CompDispatcher, CompNATS, CompDispatcher}
	s.rng.Shuffle(len(victims), func(i, j int) { victims[i], victims[j] = victims[j], victims[i] })
	for len(victims) < s.kills {
		victims = append(victims, []string{CompFront, CompDispatcher, CompDispatcher, CompNATS}[s.rng.IntN(4)])
	}
	victims = victims[:s.kills]
	at := s.spread(start, d, s.kills)
	streamAt := s.spread(start, d, s.streamFaults)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	next, nextStream := 0, 0
	for {
		select {
		case <-faults.Done():
			return nil
		case <-tick.C:
		}
		for _, comp := range s.cl.reap() {
			if err := s.restart(ctx, comp, s.rng.IntN(3) == 0); err != nil {
				return err
			}
		}
		if nextStream < len(streamAt) && time.Now().After(streamAt[nextStream]) {
			what := []string{StreamDelete, StreamPurge}[nextStream%2]
			nextStream++
			streamFault(ctx, "nats://"+s.cl.natsAddr, s.cl.h, s.cl.log, what)
		}
		if next < len(at) && time.Now().After(at[next]) {
			comp := victims[next]
			next++
			s.cl.kill(comp, CauseScheduler)
			// Down for a moment: callers and the dispatcher meet a dead peer.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(s.rng.IntN(400)) * time.Millisecond):
			}
			if err := s.restart(ctx, comp, true); err != nil {
				return err
			}
		}
	}
}

// spread returns n moments spread over the d after start, each jittered by
// up to a third of the interval between them.
func (s *scheduler) spread(start time.Time, d time.Duration, n int) []time.Time {
	interval := d / time.Duration(n+1)
	at := make([]time.Time, n)
	for i := range at {
		jitter := time.Duration(s.rng.Int64N(int64(interval)*2/3+1)) - interval/3
		at[i] = start.Add(interval*time.Duration(i+1) + jitter)
	}
	return at
}

// restart starts comp again, maybe with a failpoint armed: a restarted
// dispatcher alternates between the relay's (JetStream acked, outbox row
// not marked) and the forwarder's (downstream called, outcome not
// recorded); mcp-front gets its own (committed, not answered) half the time.
func (s *scheduler) restart(ctx context.Context, comp string, arm bool) error {
	fp := ""
	if arm && s.budget > 0 {
		switch {
		case comp == CompDispatcher && s.dispatcherArms%2 == 0:
			fp = fmt.Sprintf("%s=kill@%d", failpoint.RelayAfterPublish, 1+s.rng.IntN(4))
			s.dispatcherArms++
		case comp == CompDispatcher:
			fp = fmt.Sprintf("%s=kill@%d", failpoint.ForwarderAfterDeliver, 1+s.rng.IntN(6))
			s.dispatcherArms++
		case comp == CompFront && s.rng.IntN(2) == 0:
			fp = fmt.Sprintf("%s=kill@%d", failpoint.FrontAfterCommit, 1+s.rng.IntN(8))
		}
		if fp != "" {
			s.budget--
		}
	}
	if err := s.cl.start(ctx, comp, fp); err != nil {
		return fmt.Errorf("torture: restart %s: %w", comp, err)
	}
	return nil
}

// calm ends the faults: every dead process is restarted and every process
// with an armed failpoint is killed and restarted without it.
func (s *scheduler) calm(ctx context.Context) error {
	for _, comp := range s.cl.reap() {
		if err := s.restart(ctx, comp, false); err != nil {
			return err
		}
	}
	for _, comp := range []string{CompNATS, CompDispatcher, CompFront} {
		if p := s.cl.proc(comp); p != nil && p.Exited() {
			if err := s.restart(ctx, comp, false); err != nil {
				return err
			}
			continue
		}
		if s.cl.armedOf(comp) == "" {
			continue
		}
		s.cl.kill(comp, CauseDisarm)
		if err := s.restart(ctx, comp, false); err != nil {
			return err
		}
	}
	return nil
}

// faultKinds are the faults a fake may inject into one create or comment
// request.
var faultKinds = []downstreamtest.Fault{
	downstreamtest.LoseResponse,          // processed, answer lost
	downstreamtest.ResetBeforeProcessing, // connection reset, not processed
	downstreamtest.ServerError,           // 500
	downstreamtest.RateLimited,           // 429 + Retry-After
	downstreamtest.Slow,                  // processed, answer held past the delivery timeout
}

// feeder keeps one random fault (or none) queued in front of each fake's
// next create request, and its next comment request, so that every request
// meets a fault with the given probability.
type feeder struct {
	f    *fakes
	rng  *rand.Rand
	rate float64

	mu       sync.Mutex
	injected map[string]int // fault name → count queued
}

func (fd *feeder) run(ctx context.Context) {
	fd.injected = map[string]int{}
	if fd.rate <= 0 {
		return
	}
	queues := fd.f.queues()
	servedAt := map[string]int{}
	for _, q := range queues {
		servedAt[q.Name] = -1 // nothing queued yet
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, qu := range queues {
			k, q := qu.Name, qu.Faults
			// One item at a time: the queued one is taken once Served moves.
			if servedAt[k] >= 0 && q.Served() <= servedAt[k] {
				continue
			}
			x := downstreamtest.None
			if fd.rng.Float64() < fd.rate {
				x = faultKinds[fd.rng.IntN(len(faultKinds))]
				fd.mu.Lock()
				fd.injected[x.String()]++
				fd.mu.Unlock()
			}
			q.Next(x)
			servedAt[k] = q.Served()
		}
	}
}

func (fd *feeder) counts() map[string]int {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	out := map[string]int{}
	for k, v := range fd.injected {
		out[k] = v
	}
	return out
}
