package torture

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
	"ticketrelay/internal/archetype"
	"ticketrelay/internal/failpoint"
	"ticketrelay/store/clusterrec"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/natscluster"
)

// History additions of the multi-host run.
const (
	KindFault = "fault" // a fault that kills nothing: SIGSTOP, a cut route, a host removed for good
	KindRoute = "route" // the proxy sent a tools/call to a host (Component)

	ModeConflict = "conflict" // the same request_id with other arguments: idempotency_key_conflict expected

	CauseSIGSTOP   = "sigstop"
	CausePartition = "partition"
	CauseRemoved   = "removed" // the host's processes, killed for good, and its data directory deleted
)

// installationName is the installation of a run (every host's, in a
// multi-host run).
const installationName = "torture"

// conflictMark ends the title of a call sent with other arguments.
const conflictMark = " [other arguments]"

func isConflictTitle(t string) bool { return strings.HasSuffix(t, conflictMark) }

// mhHost is one host: its own data directory, SQLite file, dispatcher and
// mcp-front.
type mhHost struct {
	idx       int
	name      string // h1, h2, ...
	dir       string
	dbPath    string
	frontAddr string // fixed by the first start
	ledgerID  string // the host's name in the cluster record
	procs     map[string]*e2eproc.Proc
	armed     map[string]string
	removed   bool
}

// mhCluster is the system under test of a multi-host run: a 3-node NATS
// cluster and N hosts.
type mhCluster struct {
	cfg        Config
	nats       *natscluster.Cluster
	inst       installation.Name
	logDir     string
	configPath string
	secrets    []string
	h          *history
	log        *slog.Logger

	mu        sync.Mutex
	hosts     []*mhHost
	instances map[string]int
}

func newMHCluster(ctx context.Context, cfg Config, configYAML string, secrets []string, h *history) (*mhCluster, error) {
	inst, err := installation.Parse(installationName)
	if err != nil {
		return nil, err
	}
	c := &mhCluster{cfg: cfg, inst: inst, logDir: filepath.Join(cfg.Dir, "logs"), configPath: filepath.Join(cfg.Dir, "ticketrelay.yaml"),
		secrets: secrets, h: h, log: cfg.Log, instances: map[string]int{}}
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.configPath, []byte(configYAML), 0o644); err != nil {
		return nil, err
	}
	for i := range cfg.Hosts {
		name := fmt.Sprintf("h%d", i+1)
		hd := filepath.Join(cfg.Dir, "hosts", name)
		if err := os.MkdirAll(hd, 0o755); err != nil {
			return nil, err
		}
		c.hosts = append(c.hosts, &mhHost{idx: i, name: name, dir: hd, dbPath: filepath.Join(hd, "tickets.db"),
			procs: map[string]*e2eproc.Proc{}, armed: map[string]string{}})
	}
	// natscluster writes sync_interval: always on every node.
	c.nats, err = natscluster.Start(ctx, natscluster.Config{Dir: filepath.Join(cfg.Dir, "nats"), Bin: cfg.NATSBin, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (c *mhCluster) host(i int) *mhHost { return c.hosts[i] }

// live are the hosts not removed.
func (c *mhCluster) live() []*mhHost {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*mhHost
	for _, h := range c.hosts {
		if !h.removed {
			out = append(out, h)
		}
	}
	return out
}

// mhServeTimeout bounds the wait for a host's process to serve.
const mhServeTimeout = 90 * time.Second

func (c *mhCluster) spec(h *mhHost, comp, failpoints string) e2eproc.Spec {
	key := h.name + "-" + comp
	c.instances[key]++
	// A process starts when the cluster answers: its stream, its bucket.
	// Under a fault every few seconds that can take longer than a start
	// on one host (a request on a connection to a stopped node waits out
	// its timeout, and the next fault may come before an election ends);
	// the run checks what the processes do, not how fast they start.
	s := e2eproc.Spec{Name: fmt.Sprintf("%s-%d", key, c.instances[key]), ServeTimeout: mhServeTimeout}
	if failpoints != "" {
		s.Env = append(s.Env, failpoint.EnvVar+"="+failpoints)
	}
	common := []string{"-nats", c.nats.ClientURLs(), "-installation", installationName, "-multi-host", "-config", c.configPath,
		"-metrics-listen", "127.0.0.1:0"}
	switch comp {
	case CompDispatcher:
		s.Bin, s.Want = c.cfg.DispatcherBin, []string{"metrics"}
		s.Env = append(s.Env, c.secrets...)
		s.Args = append([]string{
			"-data", h.dir, "-db", h.dbPath, "-lease-ttl", "2s", "-poll-interval", "10ms",
			"-retry-base", "50ms", "-retry-max", "1s", "-delivery-timeout", "1s", "-max-attempts", "1000",
			"-audit-after", "2s", "-host-dead-after", c.cfg.HostDeadAfter.String(),
		}, common...)
	case CompFront:
		listen := h.frontAddr
		if listen == "" {
			listen = "127.0.0.1:0"
		}
		s.Bin, s.Want = c.cfg.FrontBin, []string{"mcp"}
		s.Args = append([]string{"-create-db", "-db", h.dbPath, "-listen", listen}, common...)
	default:
		panic("torture: unknown host component " + comp)
	}
	return s
}

// start starts comp of h (which must not be running) with failpoints
// armed.
func (c *mhCluster) start(ctx context.Context, h *mhHost, comp, failpoints string) error {
	c.mu.Lock()
	if h.removed {
		c.mu.Unlock()
		return nil
	}
	spec := c.spec(h, comp, failpoints)
	c.mu.Unlock()
	p, err := e2eproc.Launch(ctx, c.logDir, spec)
	if err != nil {
		return fmt.Errorf("torture: start %s of %s: %w", comp, h.name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h.procs[comp], h.armed[comp] = p, failpoints
	if comp == CompFront && h.frontAddr == "" {
		h.frontAddr = p.Addr("mcp")
	}
	c.log.Info("started", "process", p.Name(), "failpoints", failpoints)
	return nil
}

func (c *mhCluster) proc(h *mhHost, comp string) *e2eproc.Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return h.procs[comp]
}

func (c *mhCluster) armedOf(h *mhHost, comp string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return h.armed[comp]
}

// kill SIGKILLs comp of h and records why.
func (c *mhCluster) kill(h *mhHost, comp, cause string) {
	p := c.proc(h, comp)
	if p == nil || p.Exited() {
		return
	}
	p.Kill9()
	<-p.Done()
	c.h.add(Event{Kind: KindKill, Component: comp, Cause: cause, Detail: p.Name()})
	c.log.Info("killed", "process", p.Name(), "cause", cause)
}

// reap records and returns the processes of live hosts that exited
// without being asked.
func (c *mhCluster) reap() (dead []hostComp) {
	for _, h := range c.live() {
		for _, comp := range []string{CompDispatcher, CompFront} {
			p := c.proc(h, comp)
			if p == nil || !p.Exited() || p.ExitExpected() {
				continue
			}
			p.ExpectExit()
			e := Event{Kind: KindKill, Component: comp, Detail: p.Name()}
			if m := failpointRE.FindStringSubmatch(p.Log()); m != nil && p.KilledBySIGKILL() {
				e.Cause, e.Detail = CauseFailpoint, m[1]+" "+p.Name()
			} else {
				e.Cause, e.Err = CauseCrash, fmt.Sprintf("%v; stderr: %s", p.Err(), p.Tail(600))
			}
			c.h.add(e)
			c.log.Info("process died", "process", p.Name(), "cause", e.Cause, "detail", e.Detail, "err", e.Err)
			dead = append(dead, hostComp{h, comp})
		}
	}
	return dead
}

type hostComp struct {
	h    *mhHost
	comp string
}

// remove loses host h for good: both processes SIGKILLed, its ledger
// read (what it had accepted), its data directory deleted. It is never
// started again.
func (c *mhCluster) remove(ctx context.Context, h *mhHost) (Snapshot, error) {
	c.kill(h, CompDispatcher, CauseRemoved)
	c.kill(h, CompFront, CauseRemoved)
	c.mu.Lock()
	h.removed = true
	c.mu.Unlock()
	snap, err := ReadSnapshot(ctx, h.dbPath)
	if err != nil {
		return snap, err
	}
	if err := os.RemoveAll(h.dir); err != nil {
		return snap, err
	}
	c.h.add(Event{Kind: KindFault, Component: h.name, Cause: CauseRemoved, Detail: fmt.Sprintf("%d ledger rows, %d not published", len(snap.Rows), unpublished(snap))})
	c.log.Info("host removed for good", "host", h.name, "rows", len(snap.Rows), "unpublished", unpublished(snap))
	return snap, nil
}

func unpublished(s Snapshot) int {
	n := 0
	for _, r := range s.Rows {
		if !r.Published {
			n++
		}
	}
	return n
}

// stopAll stops every host's processes with SIGINT, fronts first.
func (c *mhCluster) stopAll() error {
	var errs []error
	for _, comp := range []string{CompFront, CompDispatcher} {
		for _, h := range c.live() {
			if p := c.proc(h, comp); p != nil && !p.Exited() {
				if err := p.Shutdown(); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", p.Name(), err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// killAll is the last resort of a failed run: nothing may outlive it.
func (c *mhCluster) killAll() {
	for _, h := range c.hosts {
		for _, comp := range []string{CompFront, CompDispatcher} {
			if p := c.proc(h, comp); p != nil && !p.Exited() {
				p.Kill9()
				<-p.Done()
			}
		}
	}
	if c.nats != nil {
		c.nats.Close()
	}
}

// readLedgerID reads a host's name in the cluster record from its SQLite
// file.
func readLedgerID(ctx context.Context, path string) (string, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path)+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return "", err
	}
	defer db.Close()
	var id string
	if err := db.QueryRowContext(ctx, `SELECT value FROM settings WHERE name = 'ledger_id'`).Scan(&id); err != nil {
		return "", fmt.Errorf("torture: ledger id of %s: %w", path, err)
	}
	return id, nil
}

// recordReader reads the cluster record as any host would.
type recordReader struct {
	nc    *nats.Conn
	store *clusterrec.Store
}

func openRecords(ctx context.Context, urls string, inst installation.Name, log *slog.Logger) (*recordReader, error) {
	nc, err := nats.Connect(urls, nats.Name("torture-checker"), nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	bctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	store, err := clusterrec.Bind(bctx, archetype.Archetype{Logger: log}, js, clusterrec.Config{Installation: inst, Host: "torture-checker"})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &recordReader{nc: nc, store: store}, nil
}

// ClusterRecord is what the cluster record holds about one request.
type ClusterRecord struct {
	Phase    string `json:"phase"`
	Host     string `json:"host"` // the harness's name of the host (h1...), or the ledger id of an unknown one
	TicketID string `json:"ticket_id"`
	Tool     string `json:"tool"`
	Target   string `json:"target"`
	Title    string `json:"title"`
	// Kind is "" for a create, else comment or update; OnRequest is the
	// scoped id of the create a comment or an update acts on.
	Kind      string `json:"kind,omitempty"`
	OnRequest string `json:"on_request,omitempty"`
	// GroupedOn is, for a fingerprinted create stored as an occurrence,
	// the request id of the ticket it joined.
	GroupedOn string       `json:"grouped_on,omitempty"`
	Delivery  *DeliveryRow `json:"delivery,omitempty"`
	By        string       `json:"delivered_by,omitempty"` // the host whose forwarder wrote the delivery
}

func (r *ClusterRecord) settled() bool { return r.Delivery != nil && settledState(r.Delivery.State) }

// row is what a ledger would hold of the record's request id: an
// occurrence is a comment on the ticket it joined.
func (r *ClusterRecord) row(id string) *Row {
	row := &Row{RequestID: id, Tool: r.Tool, Target: r.Target, TicketID: r.TicketID, Kind: r.Kind, OnRequest: r.OnRequest,
		HasTicket: r.Kind == "", Title: r.Title}
	if r.GroupedOn != "" {
		row.Kind, row.OnRequest, row.HasTicket = ActionComment, r.GroupedOn, false
	}
	if !row.HasTicket {
		row.Title = ""
	}
	return row
}

// read reads the records of ids (anonymous subject: the scoped id is the
// request id), naming hosts by names (ledger id → h1...).
func (rr *recordReader) read(ctx context.Context, ids []string, names map[string]string) (map[string]*ClusterRecord, error) {
	out := map[string]*ClusterRecord{}
	for _, id := range ids {
		var (
			rec   clusterrec.Record
			found bool
			err   error
		)
		for try := 0; try < 5; try++ {
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			rec, _, found, err = rr.store.Get(gctx, id)
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			return out, fmt.Errorf("torture: cluster record of %s: %w", id, err)
		}
		if !found {
			continue
		}
		cr := &ClusterRecord{Phase: string(rec.Phase), Host: nameOf(names, rec.Host), TicketID: rec.Ticket.ID,
			Tool: rec.Ticket.Tool, Target: rec.Ticket.Target, Title: rec.Ticket.Title, Kind: rec.Ticket.Kind, OnRequest: rec.Ticket.On}
		if rec.Group != nil {
			cr.GroupedOn = rec.Group.On
		}
		if d := rec.Delivery; d != nil {
			cr.Delivery = &DeliveryRow{Target: d.Target, State: d.State, Attempts: d.Attempts, ExternalID: d.ExternalID, LastError: d.LastError}
			cr.By = nameOf(names, d.By)
		}
		out[id] = cr
	}
	return out, nil
}

func nameOf(names map[string]string, ledgerID string) string {
	if n, ok := names[ledgerID]; ok {
		return n
	}
	return ledgerID
}

func (rr *recordReader) close() { rr.nc.Close() }
