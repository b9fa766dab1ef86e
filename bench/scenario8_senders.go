package bench

import (
	"cmp"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"ticketrelay/delivery/downstream/webhook"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/natscluster"
	"ticketrelay/ticket"
)

// The senders of scenario 8 (see scenario8): ticketrelay's dispatcher,
// River and the plain-POST ceiling, each against a fresh bench/receiver.

// startReceiver starts a fresh bench/receiver in dir.
func (r *runner) startReceiver(ctx context.Context, dir string, expect int, latency time.Duration) (*proc, error) {
	return startProc(ctx, "receiver", r.bin("receiver"), dir,
		[]string{"-expect", strconv.Itoa(expect), "-latency", latency.String()}, nil, "hook", "stats")
}

func receiverStatsOf(ctx context.Context, p *proc) (receiverStats, error) {
	var s receiverStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Addr("stats")+"/", nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, fmt.Errorf("bench: receiver stats: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("bench: receiver stats: %w", err)
	}
	return s, nil
}

// awaitKeys waits until the receiver holds every key (its -expect) and
// returns the time the last one arrived. sender, if set, is watched: a
// sender that exits before is an error.
func awaitKeys(ctx context.Context, recv, sender *proc, n int) (time.Time, error) {
	var at time.Time
	// A slow sender (River under load) may take minutes; no sender of a
	// backlog this size needs more than a few.
	timeout := 2*time.Minute + time.Duration(n)*5*time.Millisecond
	err := waitFor(ctx, timeout, fmt.Sprintf("the receiver holding %d keys", n), func() (bool, error) {
		if sender != nil && sender.Exited() {
			return false, fmt.Errorf("bench: %s exited while delivering: %v:\n%s", sender.Name(), sender.Err(), sender.logTail())
		}
		s, err := receiverStatsOf(ctx, recv)
		if err != nil {
			return false, err
		}
		if s.NoKey > 0 {
			return false, fmt.Errorf("bench: the receiver got %d POSTs without Idempotency-Key", s.NoKey)
		}
		if s.ExpectedAt != 0 {
			at = time.Unix(0, s.ExpectedAt)
			return true, nil
		}
		return false, nil
	})
	return at, err
}

// finish stops the sender (if it is a process) and then the receiver, and
// completes d with the receiver's final counters: a duplicate sent after
// the last key still counts.
func finish(ctx context.Context, d *drain, recv, sender *proc) error {
	if sender != nil {
		var err error
		if d.cpu, err = cpuTime(sender.Pid()); err != nil {
			return err
		}
		if d.rss, err = sender.peakRSS(); err != nil {
			return err
		}
		if err := sender.stop(); err != nil {
			return err
		}
	}
	var err error
	if d.recv, err = receiverStatsOf(ctx, recv); err != nil {
		return err
	}
	if d.recvCPU, err = cpuTime(recv.Pid()); err != nil {
		return err
	}
	return recv.stop()
}

// backlogRelay prefills n unpublished tickets for a webhook target, starts
// a receiver answering after latency and a dispatcher with its defaults,
// and times the delivery. The dispatcher runs its embedded nats-server,
// or with broker set uses that server (see startBroker).
// With profile set, the dispatcher runs under bench/profwrap and a CPU
// profile of its start is saved as PprofDir/<profile>.pprof.
func (r *runner) backlogRelay(ctx context.Context, name string, n int, latency time.Duration, profile, broker string) (drain, error) {
	d := drain{tickets: n}
	dir, err := r.mkdir(name)
	if err != nil {
		return d, err
	}
	if d.setup, err = (prefill{path: filepath.Join(dir, "tickets.db"), rows: n, target: backlogTarget}).run(ctx); err != nil {
		return d, err
	}
	recv, err := r.startReceiver(ctx, dir, n, latency)
	if err != nil {
		return d, err
	}
	defer recv.stop()
	conf := fmt.Sprintf("targets:\n  - name: %s\n    kind: webhook\n    endpoint: http://%s/hook\n", backlogTarget, recv.Addr("hook"))
	confPath := filepath.Join(dir, "ticketrelay.yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return d, err
	}
	bin, env := cmp.Or(r.dispatcherBin, r.bin("dispatcher")), r.cfg.DispatcherEnv
	var pprofAddr string
	if profile != "" {
		// bench/profwrap runs the dispatcher's own code with a pprof listener.
		if pprofAddr, err = e2eproc.FreeAddr(); err != nil {
			return d, err
		}
		bin = r.bin("profwrap")
		env = append(append([]string(nil), env...), "BENCH_PROFWRAP_APP=dispatcher", "BENCH_PPROF_ADDR="+pprofAddr)
	}
	args := []string{"-data", dir, "-db", filepath.Join(dir, "tickets.db"), "-config", confPath, "-metrics-listen", "127.0.0.1:0"}
	if broker != "" {
		args = append(args, "-nats", broker, "-installation", "bench")
	} else {
		args = append(args, "-nats-listen", "127.0.0.1:0")
	}
	start := time.Now()
	disp, err := startProc(ctx, "dispatcher", bin, dir, append(args, r.cfg.DispatcherArgs...), env, "metrics")
	if err != nil {
		return d, err
	}
	defer disp.stop()
	var profiled sync.WaitGroup
	done := make(chan struct{})
	if profile != "" {
		// Back-to-back windows until the receiver holds every key: the
		// drain's length is not known beforehand, and a CPU profile cannot
		// be ended early. go tool pprof merges the files it is given.
		profiled.Go(func() {
			for i := 1; ; i++ {
				r.profile(pprofAddr, fmt.Sprintf("%s-%02d", profile, i))(ctx, profileWindow)
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	end, err := awaitKeys(ctx, recv, disp, n)
	close(done)
	if err != nil {
		profiled.Wait()
		return d, err
	}
	if profile != "" {
		// What the drain allocated (the heap profile's cumulative side):
		// garbage is the collector's CPU.
		r.saveProfile(ctx, pprofAddr, "/debug/pprof/allocs", "allocs-"+profile)
	}
	d.took = end.Sub(start)
	// What the dispatcher saw: its connections and calls, its SQLite
	// commits, and the garbage it made (the collector's work), a count that
	// the machine's speed does not move.
	if m, err := scrape(disp.Addr("metrics")); err == nil {
		d.note = fmt.Sprintf("; dispatcher: %.0f connections dialed, %.0f delivery attempts (%.0f with the record read ahead), "+
			"concurrency limit %.0f at the end, mean call %s, mean SQLite transaction %s at %.1f ops/commit, %.0f heap allocations per ticket",
			m.Get(connsOpened, "target", backlogTarget), m.Get(deliveryAttempts, "target", backlogTarget), m.Get(readAhead, "target", backlogTarget),
			m.Get(concurrencyLimit, "target", backlogTarget), meanOf(m, deliverSeconds), meanOf(m, commitSeconds), opsPerCommit(m),
			m.Get(mallocs)/float64(n))
	}
	cpu, err := cpuTime(disp.Pid())
	// The last window ends by itself; the dispatcher is idle meanwhile.
	profiled.Wait()
	if err != nil {
		return d, err
	}
	err = finish(ctx, &d, recv, disp)
	d.cpu = cpu
	return d, err
}

// startBroker starts a nats-server process of its own on dir, as a
// production deployment runs one beside its dispatchers (-nats): the pinned
// module's server, as scenario 9's nodes are, with JetStream fsyncing every
// write as the embedded server does. It returns the server and its URL.
func (r *runner) startBroker(ctx context.Context, dir string) (*proc, string, error) {
	bin, err := r.natsServerBin(ctx, dir)
	if err != nil {
		return nil, "", err
	}
	addr, err := e2eproc.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	conf := filepath.Join(dir, "nats-server.conf")
	text := fmt.Sprintf("listen: %q\njetstream { store_dir: %q, sync_interval: always }\n", addr, filepath.Join(dir, "broker"))
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, "", err
	}
	p, err := e2eproc.Launch(ctx, dir, e2eproc.Spec{
		Name: "nats-server", Bin: bin, Args: []string{"-c", conf}, TCPAddr: addr,
		Dir: dir, SysProcAttr: childAttr(), ServeTimeout: serveTimeout,
	})
	if err != nil {
		return nil, "", fmt.Errorf("bench: %w", err)
	}
	return &proc{Proc: p}, "nats://" + addr, nil
}

// natsServerBin is the nats-server binary make bench built into the bin
// directory or, if it is not there, one built from the pinned module into
// dir, as the tests build it.
func (r *runner) natsServerBin(ctx context.Context, dir string) (string, error) {
	bin := r.bin("nats-server")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	return natscluster.Build(ctx, filepath.Join(dir, "bin"))
}

// profileWindow is the length of each CPU profile of scenario 8's first
// dispatcher.
const profileWindow = 5 * time.Second

// backlogRiver inserts n jobs with bench/riverbaseline, then starts its
// River client against a fresh receiver and times the delivery.
func (r *runner) backlogRiver(ctx context.Context, name string, n int) (drain, error) {
	d := drain{tickets: n}
	dir, err := r.mkdir(name)
	if err != nil {
		return d, err
	}
	db := filepath.Join(dir, "river.db")
	t0 := time.Now()
	ins := exec.CommandContext(ctx, r.bin("riverbaseline"), "insert", "-db", db, "-n", strconv.Itoa(n))
	ins.SysProcAttr = childAttr()
	if out, err := ins.CombinedOutput(); err != nil {
		return d, fmt.Errorf("bench: riverbaseline insert: %w: %s", err, out)
	}
	d.setup = time.Since(t0)
	recv, err := r.startReceiver(ctx, dir, n, 0)
	if err != nil {
		return d, err
	}
	defer recv.stop()
	start := time.Now()
	riv, err := startProc(ctx, "riverbaseline", r.bin("riverbaseline"), dir,
		[]string{"work", "-db", db, "-url", "http://" + recv.Addr("hook") + "/hook", "-workers", strconv.Itoa(r.cfg.RiverWorkers)}, nil, "started")
	if err != nil {
		return d, err
	}
	defer riv.stop()
	end, err := awaitKeys(ctx, recv, riv, n)
	if err != nil {
		return d, err
	}
	d.took = end.Sub(start)
	return d, finish(ctx, &d, recv, riv)
}

// backlogCeiling POSTs n tickets from ceilingSenders goroutines to a fresh
// receiver: what the receiver and loopback take with nothing stored and
// nothing to read first.
func (r *runner) backlogCeiling(ctx context.Context, name string, n int) (drain, error) {
	d := drain{tickets: n}
	dir, err := r.mkdir(name)
	if err != nil {
		return d, err
	}
	recv, err := r.startReceiver(ctx, dir, n, 0)
	if err != nil {
		return d, err
	}
	defer recv.stop()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = ceilingSenders, ceilingSenders
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	url := "http://" + recv.Addr("hook") + "/hook"
	prefix := newUUID()
	created := time.Now().UTC()
	post := func(i int) error {
		t := ticket.Ticket{
			Request: ticket.Request{RequestID: fmt.Sprintf("%s-%d", prefix, i), Tool: "create_ticket", Target: backlogTarget,
				Title: fmt.Sprintf("Nightly export failed (prefilled %d)", i), Body: sampleBody, Priority: "normal", Labels: []string{"export", "nightly"}},
			ID: fmt.Sprintf("tkt_%d", i), CreatedAt: created,
		}
		body, err := json.Marshal(webhook.Payload{Type: webhook.EventType, Timestamp: created, Data: t})
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", t.RequestID)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("bench: the receiver answered %s", resp.Status)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, ceilingSenders)
	start := time.Now()
	for g := range ceilingSenders {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := post(i); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return d, err
	}
	end, err := awaitKeys(ctx, recv, nil, n)
	if err != nil {
		return d, err
	}
	d.took = end.Sub(start)
	return d, finish(ctx, &d, recv, nil)
}

// riverVersion is the River module bench/riverbaseline was built with.
func (r *runner) riverVersion() string {
	bi, err := buildinfo.ReadFile(r.bin("riverbaseline"))
	if err != nil {
		return "(version unknown)"
	}
	for _, m := range bi.Deps {
		if m.Path == "github.com/riverqueue/river" {
			return m.Version
		}
	}
	return "(version unknown)"
}
