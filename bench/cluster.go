package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
	"ticketrelay/internal/archetype"
	"ticketrelay/store/clusterrec"
	"ticketrelay/testkit/natscluster"
	"ticketrelay/ticket"
)

// clusterScenario is the multi-host mode's scenario (issue 19): the cluster
// record's latency on R3 against R1, create_ticket throughput on two hosts
// against one, the longest stall after a leader's SIGKILL, and what the
// record costs in disk and memory.
const clusterScenario = 9

// clusterRecordTTL is the bucket's TTL the dispatcher gives it by default:
// its -stream-max-age.
const clusterRecordTTL = 7 * 24 * time.Hour

// clusterLevels are the concurrent callers of the record latency figure.
var clusterLevels = []int{1, 16, 64}

// clusterTimes are scenario 9's own windows: it measures nine things
// (three of which wait for elections) within about two minutes (quick:
// half a minute), so its windows are shorter than the other scenarios'.
type clusterTimes struct {
	settle, window time.Duration // one latency round of one side
	rounds         int           // alternated latency and throughput rounds
	memRecords     int           // records written for the size figure
	faults         int           // leaders killed: bucket, then stream
	afterFault     int           // calls accepted after a fault before it counts as over
}

func (r *runner) clusterTimes() clusterTimes {
	if r.cfg.Quick {
		return clusterTimes{settle: 200 * time.Millisecond, window: 700 * time.Millisecond, rounds: 1, memRecords: 1000, faults: 2, afterFault: 5}
	}
	return clusterTimes{settle: 300 * time.Millisecond, window: 1500 * time.Millisecond, rounds: 2, memRecords: 4000, faults: 2, afterFault: 20}
}

// scenario8 runs the cluster scenario on a 3-node nats-server cluster on
// loopback (testkit/natscluster: real child processes, sync_interval:
// always on every node).
func (r *runner) scenario9(ctx context.Context, n int) error {
	ct := r.clusterTimes()
	dir, err := r.mkdir("s8-cluster")
	if err != nil {
		return err
	}
	bin, err := r.natsServerBin(ctx, dir)
	if err != nil {
		return err
	}
	c, err := natscluster.Start(ctx, natscluster.Config{Dir: dir, Bin: bin, Log: r.log.With("component", "natscluster")})
	if err != nil {
		return err
	}
	defer c.Close()

	if err := r.clusterRecordLatency(ctx, c, ct); err != nil {
		return err
	}
	if err := r.clusterRecordSize(ctx, c, ct); err != nil {
		return err
	}
	return r.clusterHosts(ctx, c, ct, n)
}

// recordSide is one bucket whose claims are timed.
type recordSide struct {
	name  string
	store *clusterrec.Store
	nc    *nats.Conn
	node  string // the node the connection is on: the bucket's leader
	o     *opStats
}

// openRecordSide opens installation inst's bucket at replicas, as the
// dispatcher does (clusterrec.Open, TTL the stream's max age, history 1),
// and connects to its leader: both sides then pay the same client hop, and
// the ratio is what replication adds.
func openRecordSide(ctx context.Context, c *natscluster.Cluster, inst installation.Name, replicas int) (*recordSide, error) {
	bootstrap, err := connectJS(ctx, c.ClientURLs())
	if err != nil {
		return nil, err
	}
	_, err = clusterrec.Open(ctx, archetype.Archetype{Logger: discardLog()}, bootstrap, clusterrec.Config{Installation: inst, Host: "bench-" + string(inst), Replicas: replicas, TTL: clusterRecordTTL})
	bootstrap.Conn().Close()
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	leader, err := c.KVLeader(lctx, inst.Bucket())
	cancel()
	if err != nil {
		return nil, err
	}
	js, err := connectJS(ctx, c.URL(leader))
	if err != nil {
		return nil, err
	}
	s, err := clusterrec.Open(ctx, archetype.Archetype{Logger: discardLog()}, js, clusterrec.Config{Installation: inst, Host: "bench-" + string(inst), Replicas: replicas, TTL: clusterRecordTTL})
	if err != nil {
		js.Conn().Close()
		return nil, err
	}
	return &recordSide{name: fmt.Sprintf("R%d", replicas), store: s, nc: js.Conn(), node: c.Name(leader), o: &opStats{}}, nil
}

func connectJS(ctx context.Context, urls string) (jetstream.JetStream, error) {
	nc, err := nats.Connect(urls, nats.Name("ticketrelay-loadgen"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("bench: connecting to %s: %w", urls, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return js, nil
}

// benchTicket is a new realistic ticket, as mcp-front builds it for
// create_ticket: normalized, with its ticket id and creation time.
func benchTicket(i int64) (ticket.Ticket, string, error) {
	req := ticket.Request{RequestID: newUUID(), Tool: createTool, Target: "local",
		Title: fmt.Sprintf("Nightly export failed on worker-%d (run %d)", i%64, i), Body: sampleBody,
		Priority: priorities[i%int64(len(priorities))], Labels: []string{"export", "nightly"}}
	if err := req.Normalize(); err != nil {
		return ticket.Ticket{}, "", err
	}
	return ticket.Ticket{Request: req, ID: ticket.IDFor(req.Scoped()), CreatedAt: time.Now().UTC()}, req.Hash(), nil
}

// claimAccept is what Front.Create does with the cluster record for a new
// request, the local SQLite commit left out: Claim, then Accept.
func claimAccept(ctx context.Context, s *clusterrec.Store, i int64) (ticket.Ticket, error) {
	t, hash, err := benchTicket(i)
	if err != nil {
		return t, err
	}
	cl, err := s.Claim(ctx, t, hash, nil)
	if err != nil {
		return t, err
	}
	if !cl.Mine {
		return t, fmt.Errorf("bench: a new request %s was not this caller's claim", t.RequestID)
	}
	return t, s.Accept(ctx, t.Scoped())
}

// clusterRecordLatency times Claim+Accept at each level on an R3 and an
// R1 bucket of the same cluster, alternately, round by round.
func (r *runner) clusterRecordLatency(ctx context.Context, c *natscluster.Cluster, ct clusterTimes) error {
	r3, err := openRecordSide(ctx, c, "bench-r3", 3)
	if err != nil {
		return err
	}
	defer r3.nc.Close()
	r1, err := openRecordSide(ctx, c, "bench-r1", 1)
	if err != nil {
		return err
	}
	defer r1.nc.Close()
	var seq sequence
	for _, level := range clusterLevels {
		sides := []*recordSide{r3, r1}
		for _, sd := range sides {
			sd.o = &opStats{}
			// Unmeasured: the connection, the leader's caches and the
			// callers' goroutines settle.
			closedLoop(ctx, level, 0, ct.settle, func(ctx context.Context) error {
				_, err := claimAccept(ctx, sd.store, seq.next())
				return err
			})
		}
		for range ct.rounds {
			for _, sd := range sides {
				o := closedLoop(ctx, level, ct.settle, ct.window, func(ctx context.Context) error {
					_, err := claimAccept(ctx, sd.store, seq.next())
					return err
				})
				sd.o.merge(o)
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		a, b := r3.o, r1.o
		p50, p99 := ratio(float64(a.pct(50)), float64(b.pct(50))), ratio(float64(a.pct(99)), float64(b.pct(99)))
		result := "info"
		if a.errs+b.errs > 0 {
			result = "ERR"
		}
		r.rep.add(row{"9", fmt.Sprintf("cluster record Claim+Accept latency, %d callers", level),
			fmt.Sprintf("clusterrec Store.Claim then Store.Accept of a new ticket (create_ticket's sample, ~%d-byte body; Front.Create without its SQLite commit), in-process, %d concurrent callers; "+
				"R3 and R1 buckets (clusterrec.Open, TTL 7 days, history 1) of the same 3-node cluster, sync_interval: always; each side's connection on its bucket's leader; %d×%s windows alternated",
				len(sampleBody), level, ct.rounds, ct.window),
			"p50 " + ms(a.pct(50)) + ", p99 " + ms(a.pct(99)) + " R3", "p50 " + ms(b.pct(50)) + ", p99 " + ms(b.pct(99)) + " R1",
			times(p50) + " / " + times(p99), "—", result})
		for _, sd := range sides {
			r.rep.detail("9 cluster record %s @%d (leader %s): %s", sd.name, level, sd.node, sd.o.describe())
		}
	}
	r.rep.detail("9 reading R3 against R1: an R1 stream's file store fsyncs every message (sync_interval: always), one after the other; " +
		"a replicated stream's store syncs on flush instead, behind a Raft log that batches concurrent proposals, so from some concurrency on R3 may match or beat R1")
	return nil
}

// sequence numbers the tickets of a run.
type sequence struct {
	mu sync.Mutex
	n  int64
}

func (s *sequence) next() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return s.n
}

// opStats is what closedLoop measured.
type opStats struct {
	calls    int // ended in the window
	window   time.Duration
	errs     int
	firstErr error
	lat      []time.Duration // started in the window, sorted
}

func (o *opStats) merge(o2 *opStats) {
	o.calls += o2.calls
	o.window += o2.window
	o.errs += o2.errs
	if o.firstErr == nil {
		o.firstErr = o2.firstErr
	}
	o.lat = sortDurations(append(o.lat, o2.lat...))
}

func (o *opStats) pct(p float64) time.Duration { return percentile(o.lat, p) }

func (o *opStats) describe() string {
	s := fmt.Sprintf("%d calls in %s = %s; latency p50 %s, p90 %s, p99 %s, max %s (%d samples)",
		o.calls, o.window.Round(time.Millisecond), perSec(ratio(float64(o.calls), o.window.Seconds())),
		ms(o.pct(50)), ms(o.pct(90)), ms(o.pct(99)), ms(o.pct(100)), len(o.lat))
	if o.errs > 0 {
		s += fmt.Sprintf("; %d FAILED CALLS, first: %v", o.errs, oneLine(o.firstErr))
	}
	return s
}

// closedLoop runs op back to back on workers goroutines for settle+window
// and measures the calls of the window: latency of those that started in
// it, throughput of those that ended in it.
func closedLoop(ctx context.Context, workers int, settle, window time.Duration, op func(context.Context) error) *opStats {
	start := time.Now()
	end := settle + window
	type res struct {
		start, end time.Duration
		err        error
	}
	results := make([][]res, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil && time.Since(start) < end {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				x := res{start: time.Since(start)}
				x.err = op(cctx)
				x.end = time.Since(start)
				cancel()
				results[w] = append(results[w], x)
			}
		})
	}
	wg.Wait()
	o := &opStats{window: window}
	for _, rs := range results {
		for _, x := range rs {
			if x.err != nil {
				o.errs++
				if o.firstErr == nil {
					o.firstErr = x.err
				}
				continue
			}
			if x.end >= settle && x.end <= end {
				o.calls++
			}
			if x.start >= settle && x.start < end {
				o.lat = append(o.lat, x.end-x.start)
			}
		}
	}
	sortDurations(o.lat)
	return o
}

// clusterRecordSize writes records of realistic tickets into a bucket of
// its own, each accepted then marked delivered as a forwarder leaves it,
// and reads what they cost: the bucket's bytes (KV status), each node's
// store on disk, and each node's resident memory.
func (r *runner) clusterRecordSize(ctx context.Context, c *natscluster.Cluster, ct clusterTimes) error {
	const inst installation.Name = "bench-size"
	js, err := connectJS(ctx, c.ClientURLs())
	if err != nil {
		return err
	}
	defer js.Conn().Close()
	s, err := clusterrec.Open(ctx, archetype.Archetype{Logger: discardLog()}, js, clusterrec.Config{Installation: inst, Host: "bench-size", Replicas: 3, TTL: clusterRecordTTL})
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, inst.Bucket())
	if err != nil {
		return err
	}
	rssBefore, err := clusterRSS(ctx, c)
	if err != nil {
		return err
	}
	n := ct.memRecords
	var seq sequence
	var failed error
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			for {
				i := seq.next()
				if i > int64(n) || ctx.Err() != nil {
					return
				}
				if err := writeDelivered(ctx, s, kv, i); err != nil {
					mu.Lock()
					failed = errors.Join(failed, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if failed != nil {
		return failed
	}
	took := time.Since(start)
	st, err := kv.Status(ctx)
	if err != nil {
		return err
	}
	if st.Values() != uint64(n) {
		return fmt.Errorf("bench: the size bucket holds %d values after %d records with history 1", st.Values(), n)
	}
	rssAfter, err := clusterRSS(ctx, c)
	if err != nil {
		return err
	}
	var disk []int64
	for i := range c.Size() {
		b, err := dirSize(filepath.Join(c.Addrs(i).StoreDir, "jetstream", "$G", "streams", "KV_"+inst.Bucket()))
		if err != nil {
			return err
		}
		disk = append(disk, b)
	}
	perRecord := float64(st.Bytes()) / float64(n)
	var diskMax, rssDelta int64
	for i := range disk {
		diskMax = max(diskMax, disk[i])
		rssDelta = max(rssDelta, rssAfter[i]-rssBefore[i])
	}
	const million = 1e6
	settings := fmt.Sprintf("%s records of create_ticket's sample ticket (~%d-byte body, 2 labels), each claimed, accepted and then rewritten delivered (external id and URL) as a forwarder leaves it, "+
		"64 writers, R3 bucket, TTL 7 days, history 1; bytes of the bucket's live messages (KV status), per replica: ×3 across the cluster", count3(n), len(sampleBody))
	r.rep.add(row{"9", "cluster record disk per request", settings,
		fmt.Sprintf("%.0f B/record = %.0f MB per 1M", perRecord, perRecord*million/(1<<20)),
		"—", "—", "report", "info"})
	r.rep.add(row{"9", "nats-server memory per request (upper bound)", "same records; largest growth of a node's resident set (/varz mem, which nats-server reads from /proc) over the writes: " +
		"an upper bound, since it holds the write path's buffers, the recent blocks' cache and garbage not yet collected besides the per-key index",
		fmt.Sprintf("≤ %.0f B/record (%s over %s records)", float64(rssDelta)/float64(n), mib(rssDelta), count3(n)),
		"—", "—", "report", "info"})
	r.rep.detail("9 record size: %s records written in %s; KV status %d values, %d bytes (%.0f B/record, the stream's live messages); "+
		"stream directory on disk per node %v bytes (largest %.0f B/record, deleted revisions included until the file store compacts); "+
		"nats-server RSS before %v, after %v bytes",
		count3(n), took.Round(time.Millisecond), st.Values(), st.Bytes(), perRecord, disk, float64(diskMax)/float64(n), rssBefore, rssAfter)
	r.rep.detail("9 retention: a record lives TTL after its last write (TTL = the dispatcher's -stream-max-age, default 7 days) and history 1 keeps its last revision only, "+
		"so the bucket holds at most (requests per second × TTL) records: at 10 requests/s for 7 days, %s records ≈ %.1f GB per replica at the rate above; "+
		"-bucket-max-bytes caps it (new requests refused from 90%%, with an alert before)",
		count3(10*7*24*3600), float64(10*7*24*3600)*perRecord/1e9)
	return nil
}

// writeDelivered claims and accepts a new record, then rewrites it with a
// delivered outcome, as the forwarder's record holds it once settled.
func writeDelivered(ctx context.Context, s *clusterrec.Store, kv jetstream.KeyValue, i int64) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t, err := claimAccept(ctx, s, i)
	if err != nil {
		return err
	}
	rec, rev, found, err := s.Get(ctx, t.Scoped())
	if err != nil || !found {
		return fmt.Errorf("bench: reading back %s: found %v: %w", t.RequestID, found, err)
	}
	now := time.Now().UTC()
	rec.Delivery = &clusterrec.Delivery{Target: "local", State: "delivered", Attempts: 1, UpdatedAt: now, By: s.Host(), Version: 2,
		ExternalID: fmt.Sprintf("TR-%d", 100000+i), ExternalURL: fmt.Sprintf("https://tracker.example/browse/TR-%d", 100000+i)}
	b, err := jsonMarshal(rec)
	if err != nil {
		return err
	}
	_, err = kv.Update(ctx, clusterrec.Key(t.Scoped()), b, rev)
	return err
}

// clusterRSS is every node's resident set size as its /varz reports it.
func clusterRSS(ctx context.Context, c *natscluster.Cluster) ([]int64, error) {
	var out []int64
	for i := range c.Size() {
		var v struct {
			Mem int64 `json:"mem"`
		}
		if err := getJSONURL(ctx, "http://"+c.Addrs(i).HTTP+"/varz", &v); err != nil {
			return nil, err
		}
		out = append(out, v.Mem)
	}
	return out, nil
}

// dirSize is the space the files under dir take on disk.
func dirSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += fi.Size()
		}
		return nil
	})
	return total, err
}
