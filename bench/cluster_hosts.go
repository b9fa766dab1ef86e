package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/installation"
	"ticketrelay/metrics"
	"ticketrelay/testkit/natscluster"
)

// clusterInstallation is the installation the two hosts of scenario 9 run.
const clusterInstallation installation.Name = "bench"

// benchHost is one host of a deployment: its dispatcher and mcp-front.
type benchHost struct {
	name        string
	disp, front *proc
}

// deployment is what serves one side of the throughput figure: the hosts,
// the sessions spread over them, and how many of their calls the
// dispatchers have still to deliver.
type deployment struct {
	name     string
	hosts    []*benchHost
	parts    []*sessions // one per host
	s        *sessions   // all of them
	accepted int         // successful calls so far, warm-ups included
	o        *outcome
	drain    time.Duration // waiting for deliveries after the rounds
}

func (d *deployment) close() {
	for _, p := range d.parts {
		p.close()
	}
	for _, h := range d.hosts {
		stopAll(h.front, h.disp)
	}
}

// startMultiHost starts host name of the installation on the cluster, with
// the dispatcher's and mcp-front's defaults but for -multi-host.
func (r *runner) startMultiHost(ctx context.Context, c *natscluster.Cluster, name string) (*benchHost, error) {
	dir, err := r.mkdir("s8-host-" + name)
	if err != nil {
		return nil, err
	}
	common := []string{"-multi-host", "-nats", c.ClientURLs(), "-installation", string(clusterInstallation), "-metrics-listen", "127.0.0.1:0"}
	disp, err := startProc(ctx, "dispatcher-"+name, r.bin("dispatcher"), dir,
		append([]string{"-data", dir, "-db", filepath.Join(dir, "tickets.db")}, common...), nil, "metrics")
	if err != nil {
		return nil, err
	}
	front, err := startProc(ctx, "mcp-front-"+name, r.bin("mcp-front"), dir,
		append([]string{"-create-db", "-db", filepath.Join(dir, "tickets.db"), "-listen", "127.0.0.1:0"}, common...), nil, "mcp", "metrics")
	if err != nil {
		disp.stop()
		return nil, err
	}
	return &benchHost{name: name, disp: disp, front: front}, nil
}

// connectDeployment opens n sessions spread evenly over d's hosts.
func (r *runner) connectDeployment(ctx context.Context, d *deployment, n int) error {
	d.s = &sessions{}
	for i, h := range d.hosts {
		k := n / len(d.hosts)
		if i < n%len(d.hosts) {
			k++
		}
		s, err := connect(ctx, h.front.mcpURL(), r.cfg.Protocol, k)
		if err != nil {
			return err
		}
		d.parts = append(d.parts, s)
		d.s.list = append(d.s.list, s.list...)
	}
	return nil
}

// procs are d's server processes, fronts first; procNames name them.
func (d *deployment) procs() []*proc {
	var ps []*proc
	for _, h := range d.hosts {
		ps = append(ps, h.front)
	}
	for _, h := range d.hosts {
		ps = append(ps, h.disp)
	}
	return ps
}

func (d *deployment) procNames() []string {
	var names []string
	for _, p := range d.procs() {
		names = append(names, p.Name())
	}
	return names
}

// delivered is how many tickets d's dispatchers have delivered.
func (d *deployment) delivered() (float64, error) {
	var sum float64
	for _, h := range d.hosts {
		m, err := scrape(h.disp.Addr("metrics"))
		if err != nil {
			return 0, err
		}
		sum += m.Get("ticketrelay_deliveries_total", "outcome", metrics.OutcomeDelivered)
	}
	return sum, nil
}

// run is one round on d; then d's dispatchers deliver what it accepted
// before the other side's round, so that neither side's round pays for the
// other's backlog.
func (d *deployment) run(ctx context.Context, l load) error {
	o, err := d.s.run(ctx, l)
	if err != nil {
		return err
	}
	d.accepted += len(o.done)
	if d.o != nil {
		d.o.merge(o)
	}
	start := time.Now()
	err = waitFor(ctx, 2*time.Minute, d.name+" delivering what it accepted", func() (bool, error) {
		n, err := d.delivered()
		return n >= float64(d.accepted), err
	})
	d.drain += time.Since(start)
	return err
}

// clusterHosts measures create_ticket on two hosts of the installation
// against one host in single-host mode, then the failover of the two
// hosts.
func (r *runner) clusterHosts(ctx context.Context, c *natscluster.Cluster, ct clusterTimes, n int) error {
	multi := &deployment{name: "multi-host"}
	defer multi.close()
	for _, name := range []string{"a", "b"} {
		h, err := r.startMultiHost(ctx, c, name)
		if err != nil {
			return err
		}
		multi.hosts = append(multi.hosts, h)
	}
	single := &deployment{name: "single-host"}
	defer single.close()
	dir, err := r.mkdir("s8-single")
	if err != nil {
		return err
	}
	disp, err := startProc(ctx, "dispatcher", r.bin("dispatcher"), dir, []string{"-data", dir, "-db", filepath.Join(dir, "tickets.db"),
		"-nats-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0"}, nil, "metrics")
	if err != nil {
		return err
	}
	front, err := startProc(ctx, "mcp-front", r.bin("mcp-front"), dir, []string{"-create-db", "-db", filepath.Join(dir, "tickets.db"),
		"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0"}, nil, "mcp", "metrics")
	if err != nil {
		disp.stop()
		return err
	}
	single.hosts = []*benchHost{{name: "single", disp: disp, front: front}}

	sides := []*deployment{multi, single}
	for _, d := range sides {
		if err := r.connectDeployment(ctx, d, n); err != nil {
			return err
		}
		if err := d.run(ctx, load{tool: createTool, src: &freshSource{}, measure: r.cfg.Warmup}); err != nil {
			return err
		}
		d.o = &outcome{}
	}
	for range ct.rounds {
		for _, d := range sides {
			if err := d.run(ctx, r.timed(createTool, &freshSource{}, d.procs()...)); err != nil {
				return err
			}
		}
	}
	rt := ratio(multi.o.throughput(), single.o.throughput())
	result := "info"
	if multi.o.errors+single.o.errors > 0 {
		result = "ERR"
	}
	r.rep.add(row{"9", fmt.Sprintf("create_ticket throughput, two hosts vs one, %d sessions", n),
		fmt.Sprintf("%d sessions split evenly over 2 hosts (mcp-front + dispatcher each, -multi-host on the 3-node cluster, R3 stream and bucket) vs 1 host "+
			"(mcp-front + dispatcher, embedded nats-server), the same box; local target; %d×%s windows alternated, each side's dispatchers deliver its backlog before the other's round",
			n, ct.rounds, r.cfg.Measure),
		perSec(multi.o.throughput()), perSec(single.o.throughput()) + " single host", times(rt), "—", result})
	r.rep.add(row{"9", fmt.Sprintf("create_ticket p99 latency, two hosts vs one, %d sessions", n), "same runs",
		ms(percentile(multi.o.lat, 99)), ms(percentile(single.o.lat, 99)) + " single host",
		times(ratio(float64(percentile(multi.o.lat, 99)), float64(percentile(single.o.lat, 99)))), "—", result})
	for _, d := range sides {
		r.rep.detail("%s; waited %s in all for its dispatchers to deliver its rounds", describe(fmt.Sprintf("9 create_ticket @%d, %s", n, d.name), d.o, d.procNames()...), d.drain.Round(time.Millisecond))
	}
	single.close()
	return r.clusterFailover(ctx, c, ct, multi)
}

// clusterFailover kills the bucket's leader, then the stream's, under a
// steady load on both hosts, and reports the longest time no call was
// accepted around each fault. A failed call is retried on the other host
// with the same request_id and arguments, as a client behind a load
// balancer would.
func (r *runner) clusterFailover(ctx context.Context, c *natscluster.Cluster, ct clusterTimes, multi *deployment) error {
	const callers = 4
	var per [][]*mcp.ClientSession // per[host][caller]
	for _, h := range multi.hosts {
		s, err := connect(ctx, h.front.mcpURL(), r.cfg.Protocol, callers)
		if err != nil {
			return err
		}
		defer s.close()
		per = append(per, s.list)
	}
	var (
		mu       sync.Mutex
		accepted []time.Time
		retries  int
		bad      []string // failures that do not say to retry
	)
	acceptedSince := func(t time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		k := 0
		for _, a := range accepted {
			if !a.Before(t) {
				k++
			}
		}
		return k
	}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	src := &freshSource{}
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			for lctx.Err() == nil {
				a, _ := src.next(w)
				for try := 0; lctx.Err() == nil; try++ {
					cs := per[(w+try)%len(per)][w]
					cctx, cancel := context.WithTimeout(lctx, 40*time.Second)
					res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: createTool, Arguments: a})
					cancel()
					if err == nil && !res.IsError {
						mu.Lock()
						accepted = append(accepted, time.Now())
						mu.Unlock()
						break
					}
					if lctx.Err() != nil {
						return
					}
					msg := ""
					if err != nil {
						msg = err.Error()
					} else {
						msg = toolText(res)
					}
					mu.Lock()
					retries++
					if !strings.Contains(strings.ToLower(msg), "retry") && len(bad) < 3 {
						bad = append(bad, msg)
					}
					mu.Unlock()
				}
			}
		})
	}
	defer wg.Wait()
	loadStart := time.Now()
	if err := waitFor(ctx, 30*time.Second, "calls accepted before the faults", func() (bool, error) {
		return acceptedSince(loadStart) >= ct.afterFault, nil
	}); err != nil {
		return err
	}
	type fault struct {
		what, node, also string
		at, over         time.Time
	}
	var faults []fault
	for k := range ct.faults {
		what, stream := "bucket", "KV_"+clusterInstallation.Bucket()
		if k == 1 {
			what, stream = "stream", clusterInstallation.Stream()
		}
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		leader, err := c.StreamLeader(lctx, stream)
		cancel()
		if err != nil {
			return err
		}
		f := fault{what: what, node: c.Name(leader), also: r.alsoLed(ctx, c, leader, what)}
		f.at = time.Now()
		r.log.Info("scenario 9: SIGKILL of the "+what+" leader", "node", f.node)
		if err := c.Kill(leader); err != nil {
			return err
		}
		if err := waitFor(ctx, 90*time.Second, "calls accepted after the SIGKILL of the "+what+" leader", func() (bool, error) {
			return acceptedSince(f.at) >= ct.afterFault, nil
		}); err != nil {
			return err
		}
		f.over = time.Now()
		faults = append(faults, f)
		if err := c.Restart(ctx, leader); err != nil {
			return err
		}
		// One fault at a time: the node is a current replica again before
		// the next one.
		rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		err = c.WaitReady(rctx)
		cancel()
		if err != nil {
			return err
		}
	}
	stopLoad()
	wg.Wait()
	mu.Lock()
	acc := slices.Clone(accepted)
	nRetries, nBad := retries, slices.Clone(bad)
	mu.Unlock()
	slices.SortFunc(acc, func(a, b time.Time) int { return a.Compare(b) })
	for _, f := range faults {
		gap := longestGap(acc, f.at, f.over)
		result := verdict(gap <= 10*time.Second)
		if len(nBad) > 0 {
			result = "ERR"
		}
		r.rep.add(row{"9", "failover: SIGKILL of the " + f.what + " leader",
			fmt.Sprintf("2 hosts, %d callers each calling create_ticket back to back, a failed call retried on the other host with the same request_id; "+
				"the longest time with no call accepted, from the last acceptance before the SIGKILL until %d calls were accepted after it; node %s%s; restarted and current again before the next fault",
				callers, ct.afterFault, f.node, f.also),
			ms(gap), "—", "—", "≤ 10 s", result})
	}
	r.rep.detail("9 failover: %d calls accepted over %s, %d failed calls retried on the other host", len(acc), time.Since(loadStart).Round(time.Second), nRetries)
	if len(nBad) > 0 {
		r.rep.detail("9 failover: failed calls that do not say to retry, first %d: %q", len(nBad), nBad)
	}
	return nil
}

// alsoLed says which other leaders node i holds besides the one about to
// be killed: a node that leads the bucket too stalls acceptance longer.
func (r *runner) alsoLed(ctx context.Context, c *natscluster.Cluster, i int, what string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var also []string
	if what != "bucket" {
		if l, err := c.KVLeader(ctx, clusterInstallation.Bucket()); err == nil && l == i {
			also = append(also, "the bucket's")
		}
	}
	if what != "stream" {
		if l, err := c.StreamLeader(ctx, clusterInstallation.Stream()); err == nil && l == i {
			also = append(also, "the stream's")
		}
	}
	if l, err := c.MetaLeader(ctx); err == nil && l == i {
		also = append(also, "the JetStream meta")
	}
	if len(also) == 0 {
		return " (no other leader)"
	}
	return " (also " + strings.Join(also, " and ") + " leader)"
}

// longestGap is the longest time between consecutive acceptances (sorted)
// from the last one before from until until.
func longestGap(accepted []time.Time, from, until time.Time) time.Duration {
	prev := from
	for _, a := range accepted {
		if a.Before(from) {
			prev = a
		}
	}
	var gap time.Duration
	for _, a := range accepted {
		if a.Before(prev) || a.After(until) {
			continue
		}
		gap = max(gap, a.Sub(prev))
		prev = a
	}
	return max(gap, 0)
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// getJSONURL decodes the JSON document at url.
func getJSONURL(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
