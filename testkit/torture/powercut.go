package torture

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/installation"
	"ticketrelay/store/outbox"
	"ticketrelay/testkit/powercut"
)

// The power-cut mode (Config.PowerCut, issue 24).
//
// The SQLite file, the dispatcher's data directory and the nats-server's
// JetStream store live on an testkit/powercut mount; the fakes (the
// outside world: a power cut of our machine does not undo what Zendesk
// stored), the logs and the history do not. Instead of killing one process
// at a time, the cutter SIGKILLs all three together at seeded random
// moments, cuts the power (Cut: everything not fsynced is gone), checks what
// survived, and starts everything again on it. Around each cut it reads the
// ledger (in a child process, see child.go) before the kill and after the
// cut, and the stream after nats-server has recovered, so that a loss is
// pinned to the cut that caused it; the end of the run adds the stream
// against the final ledger and the downstream calls made after each cut.

// CausePowerCut is the kill cause of the processes SIGKILLed together for a
// power cut.
const CausePowerCut = "powercut"

// PowerCutInput is what the checker reads about the cuts of a power-cut run.
type PowerCutInput struct {
	Lazy bool       `json:"lazy"` // nats-server without sync_interval: always
	Cuts []CutStats `json:"cuts"`
	// Violations found at the cuts: acknowledged requests or committed
	// records missing after a cut, a database that fails its check, a
	// process that refused to start.
	Violations []string `json:"violations,omitempty"`
	// StreamViolations are the published messages the stream no longer
	// held after a cut.
	StreamViolations []string `json:"stream_violations,omitempty"`
	// Acked are the requests a client saw acknowledged before some cut.
	Acked int `json:"acked"`
	// DeliveredAt is, for each request the ledger held as delivered right
	// after a cut (the first such cut), its record and what the fake held
	// then: nothing may be sent for it again.
	DeliveredAt map[string]DeliveredMark `json:"delivered_at,omitempty"`
	// StreamLost are the requests whose message the stream no longer held
	// after a cut, though the ledger had it published; true if it was not
	// delivered then (the audit must publish it again).
	StreamLost map[string]bool `json:"stream_lost,omitempty"`
	// StreamEnd lists the published rows of the final ledger whose message
	// the stream does not hold; StreamChecked counts the rows looked up.
	StreamEnd     []string `json:"stream_end,omitempty"`
	StreamChecked int      `json:"stream_checked"`
}

// CutStats describe one cut.
type CutStats struct {
	N             int    `json:"n"`
	Acked         int    `json:"acked"`       // requests acknowledged before it, in total
	LedgerRows    int    `json:"ledger_rows"` // after it
	Lost          int    `json:"lost"`        // acknowledged or committed, missing after it
	Integrity     string `json:"integrity"`   // quick_check after it
	StreamLost    int    `json:"stream_lost"` // published messages the stream no longer held
	StreamPending int    `json:"stream_pending"`
	FilesReverted int    `json:"files_reverted"`
	BytesDropped  int64  `json:"bytes_dropped"`
	EntriesUndone int    `json:"entries_undone"`
	Refused       string `json:"refused,omitempty"`
}

// DeliveredMark is a delivered request as a cut left it.
type DeliveredMark struct {
	Cut        int    `json:"cut"`
	Attempts   int    `json:"attempts"`
	ExternalID string `json:"external_id"`
	Items      int    `json:"items"`   // items the fake held for it
	Applied    int    `json:"applied"` // create calls that landed on them
}

// maxStreamViolations bounds the messages lost by the stream that are
// listed one by one.
const maxStreamViolations = 1000

// errRefused ends a power-cut run: a process would not start on what a cut
// left, so the system cannot go on.
var errRefused = errors.New("torture: a process refused to start after a power cut")

// cutter is the scheduler of the power-cut mode.
type cutter struct {
	cl   *cluster
	pc   *powercut.FS
	fk   *fakes
	rng  *rand.Rand
	cuts int
	in   PowerCutInput
	// acked are the requests seen acknowledged so far (checked at each cut).
	acked map[string]bool
}

func newCutter(cl *cluster, pc *powercut.FS, fk *fakes, rng *rand.Rand, cuts int, lazy bool) *cutter {
	return &cutter{cl: cl, pc: pc, fk: fk, rng: rng, cuts: cuts, acked: map[string]bool{},
		in: PowerCutInput{Lazy: lazy, DeliveredAt: map[string]DeliveredMark{}, StreamLost: map[string]bool{}}}
}

// run cuts the power at seeded random moments until faults ends, and
// restarts a process that dies on its own.
func (c *cutter) run(ctx, faults context.Context, d time.Duration) error {
	start := time.Now()
	interval := d / time.Duration(c.cuts+1)
	at := make([]time.Time, c.cuts)
	for i := range at {
		jitter := time.Duration(c.rng.Int64N(int64(interval)*2/3+1)) - interval/3
		at[i] = start.Add(interval*time.Duration(i+1) + jitter)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for next := 0; ; {
		select {
		case <-faults.Done():
			// Cuts take seconds, and a late one is as good as any: every
			// scheduled cut happens.
			for ; next < len(at); next++ {
				c.cl.log.Info("power cut after the faults stopped", "cut", next+1)
				if err := c.cut(ctx, next+1); err != nil {
					return err
				}
			}
			return nil
		case <-tick.C:
		}
		for _, comp := range c.cl.reap() {
			if err := c.start(ctx, comp, 0); err != nil {
				return err
			}
		}
		if next < len(at) && time.Now().After(at[next]) {
			next++
			if err := c.cut(ctx, next); err != nil {
				return err
			}
		}
	}
}

// cut is one power cut: read the ledger, SIGKILL everything, cut, check
// what survived, start everything again.
func (c *cutter) cut(ctx context.Context, n int) error {
	log := c.cl.log.With("cut", n)
	cs := CutStats{N: n}
	violate := func(format string, a ...any) {
		c.in.Violations = append(c.in.Violations, fmt.Sprintf("cut %d: ", n)+fmt.Sprintf(format, a...))
	}
	// What was committed shortly before the kill must survive it too.
	pre, err := readSnapshotChild(ctx, c.cl.dbPath)
	if err != nil {
		return fmt.Errorf("torture: before cut %d: %w", n, err)
	}

	c.cl.killTogether(CausePowerCut)
	// The processes are dead: every answer recorded from here on was sent
	// before the kill, and is checked at the next cut and at the end.
	for _, e := range c.cl.h.snapshot() {
		if e.Kind == KindCall && e.Outcome == OutAccepted || e.Kind == KindFind && e.Outcome == OutKnown {
			c.acked[e.RequestID] = true
		}
	}
	cs.Acked = len(c.acked)
	if err := c.cutPower(ctx); err != nil {
		return err
	}
	st := c.pc.Stats().LastCut
	cs.FilesReverted, cs.BytesDropped, cs.EntriesUndone = st.FilesReverted, st.BytesDropped, st.EntriesUndone
	c.cl.h.add(Event{Kind: KindPhase, Detail: fmt.Sprintf("power cut %d: %d files reverted (%d bytes), %d entries undone %v",
		n, st.FilesReverted, st.BytesDropped, st.EntriesUndone, st.Undone)})

	post, err := readSnapshotChild(ctx, c.cl.dbPath)
	if err != nil {
		// The ledger as the cut left it cannot be read: what mcp-front
		// would meet on its start.
		violate("the ledger cannot be read after the cut: %v", err)
		cs.Refused = "ledger: " + err.Error()
		c.in.Cuts = append(c.in.Cuts, cs)
		return errRefused
	}
	cs.LedgerRows, cs.Integrity = len(post.Snapshot.Rows), post.Integrity
	if post.Integrity != "ok" {
		violate("quick_check after the cut: %s", post.Integrity)
	}
	lost := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(c.acked)) {
		if post.Snapshot.Rows[id] == nil {
			lost[id] = true
			violate("%s: acknowledged to a client before the cut, not in the ledger after it", id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(pre.Snapshot.Rows)) {
		was, now := pre.Snapshot.Rows[id], post.Snapshot.Rows[id]
		switch {
		case now == nil:
			if !lost[id] {
				lost[id] = true
				violate("%s: committed before the cut, not in the ledger after it", id)
			}
		case was.Published && !now.Published:
			violate("%s: marked published before the cut, not after it", id)
		case was.Delivery != nil && settledState(was.Delivery.State) &&
			(now.Delivery == nil || now.Delivery.State != was.Delivery.State || now.Delivery.ExternalID != was.Delivery.ExternalID):
			violate("%s: delivery record %s (%s) before the cut, %+v after it", id, was.Delivery.State, was.Delivery.ExternalID, now.Delivery)
		}
	}
	cs.Lost = len(lost)
	c.markDelivered(n, post.Snapshot)

	// nats-server first, alone: what the stream holds before anything
	// publishes or audits.
	if err := c.start(ctx, CompNATS, n); err != nil {
		c.in.Cuts = append(c.in.Cuts, cs)
		return err
	}
	held, err := c.cl.streamHolds(ctx, post.Snapshot)
	if err != nil {
		return fmt.Errorf("torture: after cut %d: %w", n, err)
	}
	listed := 0
	for _, id := range slices.Sorted(maps.Keys(held)) {
		if held[id] {
			continue
		}
		r := post.Snapshot.Rows[id]
		pending := r.Delivery == nil || !settledState(r.Delivery.State)
		c.in.StreamLost[id] = c.in.StreamLost[id] || pending
		cs.StreamLost++
		if pending {
			cs.StreamPending++
		}
		// A lazy server loses the whole stream at every cut: the list is
		// kept short, the counts are complete.
		if len(c.in.StreamViolations) < maxStreamViolations {
			listed++
			c.in.StreamViolations = append(c.in.StreamViolations, fmt.Sprintf("cut %d: %s: published (acknowledged by the stream at sequence %d, generation %d) before the cut, not in the stream after it",
				n, id, r.StreamSeq, r.Generation))
		}
	}
	if cs.StreamLost > listed {
		c.in.StreamViolations = append(c.in.StreamViolations, fmt.Sprintf("cut %d: the stream lost %d more published messages (not listed)", n, cs.StreamLost-listed))
	}
	for _, comp := range []string{CompDispatcher, CompFront} {
		if err := c.start(ctx, comp, n); err != nil {
			c.in.Cuts = append(c.in.Cuts, cs)
			return err
		}
	}
	c.in.Cuts = append(c.in.Cuts, cs)
	c.in.Acked = len(c.acked)
	log.Info("power cut survived", "acked", cs.Acked, "ledger_rows", cs.LedgerRows, "lost", cs.Lost,
		"stream_lost", cs.StreamLost, "stream_pending", cs.StreamPending, "files_reverted", cs.FilesReverted, "entries_undone", cs.EntriesUndone)
	return nil
}

// cutPower cuts the mount. Every process using it has been waited for; the
// kernel may still be releasing their files, so a refusal is tried again for
// a bounded time.
func (c *cutter) cutPower(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.pc.Cut()
		if err == nil || !errors.Is(err, powercut.ErrBusy) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// markDelivered remembers each request the ledger holds as delivered after
// cut n (if no earlier cut did), with what its fake held then.
func (c *cutter) markDelivered(n int, s Snapshot) {
	items, applied := map[string]int{}, map[string]int{}
	for _, r := range c.fk.records() {
		items[r.RequestID]++
		applied[r.RequestID] += r.Applied
	}
	for id, r := range s.Rows {
		if r.Delivery == nil || r.Delivery.State != "delivered" {
			continue
		}
		if _, ok := c.in.DeliveredAt[id]; ok {
			continue
		}
		c.in.DeliveredAt[id] = DeliveredMark{Cut: n, Attempts: r.Delivery.Attempts, ExternalID: r.Delivery.ExternalID,
			Items: items[id], Applied: applied[id]}
	}
}

// start starts comp after cut n (0: it died on its own), retrying a refusal
// twice: a process that still refuses is a violation, and ends the run.
func (c *cutter) start(ctx context.Context, comp string, n int) error {
	var err error
	for range 3 {
		if err = c.cl.start(ctx, comp, ""); err == nil {
			if comp == CompDispatcher {
				return c.cl.syncNATSStore(ctx)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.cl.log.Warn("process refused to start", "process", comp, "cut", n, "err", err)
	}
	c.cl.h.add(Event{Kind: KindKill, Component: comp, Cause: CauseCrash, Detail: "refused to start", Err: err.Error()})
	c.in.Violations = append(c.in.Violations, fmt.Sprintf("cut %d: %s refused to start three times: %v", n, comp, err))
	return errRefused
}

// natsStream is the stream of the run's installation.
func natsStream() string {
	n, err := installation.Parse(installationName)
	if err != nil {
		panic(err)
	}
	return n.Stream()
}

// syncNATSStore does what the operator of an external nats-server must (as
// the dispatcher does for its embedded one, decision 0013): once the
// stream and the forwarder's consumers exist, fsync every directory of the
// store, which nats-server never does for the directories it creates.
// Without it the first cut takes the whole stream with it, and the run
// would test nats-server's known gap rather than ticketrelay
// (docs/decisions/0030-powercut-torture.md).
func (c *cluster) syncNATSStore(ctx context.Context) error {
	if c.pc == nil {
		return nil
	}
	obs := filepath.Join(c.natsStore, "jetstream", server.DEFAULT_GLOBAL_ACCOUNT, "streams", natsStream(), "obs")
	deadline := time.Now().Add(20 * time.Second)
	for {
		es, err := os.ReadDir(obs)
		if err == nil && len(es) >= len(Kinds) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("torture: the dispatcher did not create its %d consumers within 20s (%d in %s: %v)", len(Kinds), len(es), obs, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := natsjs.SyncStoreDirs(c.natsStore); err != nil {
		return fmt.Errorf("torture: %w", err)
	}
	return nil
}

// streamHolds looks up the message of every published row of s in the
// stream: true if the stream holds it at the row's sequence.
func (c *cluster) streamHolds(ctx context.Context, s Snapshot) (map[string]bool, error) {
	nc, err := nats.Connect("nats://"+c.natsAddr, nats.Name("torture-check"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("stream check: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("stream check: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// JetStream answers once it has recovered its streams.
	for {
		if _, err = js.AccountInfo(cctx); err == nil {
			break
		}
		select {
		case <-cctx.Done():
			return nil, fmt.Errorf("stream check: JetStream does not answer: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	held := map[string]bool{}
	st, err := js.Stream(cctx, natsStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st = nil // gone: it holds nothing
	} else if err != nil {
		return nil, fmt.Errorf("stream check: %w", err)
	}
	for id, r := range s.Rows {
		if !r.Published {
			continue
		}
		if st == nil || r.StreamSeq == 0 {
			held[id] = false
			continue
		}
		m, err := st.GetMsg(cctx, r.StreamSeq)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			held[id] = false
		case err != nil:
			return nil, fmt.Errorf("stream check: %s sequence %d: %w", id, r.StreamSeq, err)
		default:
			want := outbox.Message{RequestID: id, Generation: r.Generation}.MsgID()
			held[id] = m.Header.Get(jetstream.MsgIDHeader) == want
		}
	}
	return held, nil
}

// finish checks the stream against the final ledger (nats-server still
// running, the others stopped).
func (c *cutter) finish(ctx context.Context, s Snapshot) error {
	held, err := c.cl.streamHolds(ctx, s)
	if err != nil {
		return fmt.Errorf("torture: at the end: %w", err)
	}
	c.in.StreamChecked = len(held)
	for _, id := range slices.Sorted(maps.Keys(held)) {
		if !held[id] {
			c.in.StreamEnd = append(c.in.StreamEnd, fmt.Sprintf("%s (sequence %d, generation %d)", id, s.Rows[id].StreamSeq, s.Rows[id].Generation))
		}
	}
	c.in.Acked = len(c.acked)
	return nil
}

// mountPowerCut mounts a power-cut filesystem at dir/mnt over dir/disk.
// nats-server's store exists before the mount, so that it counts as
// durable, as a directory an operator made would be (nats-server does not
// sync the directories it makes). The data directory does not: the
// dispatcher and mcp-front make it, and must make it durable themselves.
func mountPowerCut(ctx context.Context, dir string) (*powercut.FS, error) {
	backing, mnt := filepath.Join(dir, "disk"), filepath.Join(dir, "mnt")
	for _, d := range []string{filepath.Join(backing, "nats"), mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("torture: %w", err)
		}
	}
	pc, err := powercut.Mount(ctx, backing, mnt, powercut.Options{})
	if err != nil {
		return nil, fmt.Errorf("torture: the power-cut mode needs a FUSE mount: %w", err)
	}
	return pc, nil
}

// calm ends the faults: every process that died is started again.
func (c *cutter) calm(ctx context.Context) error {
	c.cl.reap()
	for _, comp := range []string{CompNATS, CompDispatcher, CompFront} {
		if p := c.cl.proc(comp); p != nil && p.Exited() {
			if err := c.start(ctx, comp, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// powerCutRefused is the verdict of a run that a process ended by refusing
// to start.
func powerCutRefused(in PowerCutInput) Property {
	return property("power-cut", in.Violations, "the run stopped after %d cuts: a process refused to start on what a cut left", len(in.Cuts))
}

// powerCut is the verdict on the cuts, in two properties. power-cut:
// nothing acknowledged or committed was lost by a cut, the database passed
// its check after each, and nothing delivered before a cut was sent again
// after it. stream-durable: the stream held every message it had
// acknowledged, after every cut and at the end; a lazy nats-server fails it
// (while the end-to-end properties hold if the audit published again what
// it lost before delivery).
func (c *checker) powerCut() []Property {
	pc := c.in.PowerCut
	v := slices.Clone(pc.Violations)
	redelivered := 0
	for _, id := range slices.Sorted(maps.Keys(pc.DeliveredAt)) {
		m := pc.DeliveredAt[id]
		items, applied := 0, 0
		for _, r := range c.recs[id] {
			items++
			applied += r.Applied
		}
		row := c.in.DB.Rows[id]
		switch {
		case row == nil || row.Delivery == nil:
			v = append(v, fmt.Sprintf("%s: delivered at cut %d, no delivery record at the end", id, m.Cut))
		case row.Delivery.State != "delivered" || row.Delivery.Attempts != m.Attempts || row.Delivery.ExternalID != m.ExternalID:
			redelivered++
			v = append(v, fmt.Sprintf("%s: delivered as %q after %d attempts at cut %d; at the end %s as %q after %d attempts",
				id, m.ExternalID, m.Attempts, m.Cut, row.Delivery.State, row.Delivery.ExternalID, row.Delivery.Attempts))
		case items != m.Items || applied != m.Applied:
			redelivered++
			v = append(v, fmt.Sprintf("%s: delivered at cut %d, sent again after it: %s held %d items (%d calls applied) then, %d (%d) at the end",
				id, m.Cut, c.reqs[id].Kind, m.Items, m.Applied, items, applied))
		}
	}
	// A message the stream lost before its delivery reaches the target
	// only if the audit publishes it again.
	pending, recovered, recoveredUncertain := 0, 0, 0
	for _, id := range slices.Sorted(maps.Keys(pc.StreamLost)) {
		if !pc.StreamLost[id] {
			continue
		}
		pending++
		switch row := c.in.DB.Rows[id]; {
		case row == nil:
		case row.Generation == 0:
			v = append(v, fmt.Sprintf("%s: the stream lost its message before delivery, and the audit did not publish it again", id))
		case c.final(id) == "delivered":
			recovered++
		case c.final(id) == "uncertain":
			recoveredUncertain++
		}
	}
	lost := 0
	for _, cs := range pc.Cuts {
		lost += cs.Lost
	}
	dup := 0
	for _, id := range c.accepted() {
		if c.reqs[id].Keyed && len(c.recs[id]) > 1 {
			dup++
		}
	}
	mode := "sync_interval: always"
	if pc.Lazy {
		mode = "nats-server without sync_interval: always"
	}
	cuts := property("power-cut", v, "%d cuts survived (%s); %d requests acknowledged before a cut, %d lost, %d duplicated on keyed targets, "+
		"%d sent again after a cut found them delivered",
		len(pc.Cuts), mode, pc.Acked, lost, dup, redelivered)

	sv := slices.Clone(pc.StreamViolations)
	for _, s := range pc.StreamEnd {
		id, _, _ := strings.Cut(s, " ")
		if _, lost := pc.StreamLost[id]; !lost {
			sv = append(sv, "at the end the stream does not hold the message of published "+s)
		}
	}
	stream := property("stream-durable", sv, "the stream lost the acknowledged messages of %d requests at cuts (%d not yet delivered then, "+
		"published again by the audit: %d then delivered, %d uncertain); %d of %d published messages missing from the stream at the end",
		len(pc.StreamLost), pending, recovered, recoveredUncertain, len(pc.StreamEnd), pc.StreamChecked)
	return []Property{cuts, stream}
}
