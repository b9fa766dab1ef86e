// Package natscluster runs a real nats-server cluster as child processes on
// loopback, for tests, the torture run and a local demo: N nodes named
// n1..nN, one cluster, JetStream with sync_interval: always on every node,
// run-time-chosen ports, optional accounts and users. Its fault controls
// act on one node at a time: SIGKILL, SIGSTOP/SIGCONT, restart on the same
// ports and store, a store wiped for good, and a partition that cuts the
// node's routes while its client port stays reachable.
//
// nats-server has no partition switch, so every node's route listener sits
// behind a loopback TCP proxy owned by the harness; the routes (and the
// route address each node advertises) point at the proxies. Partition(i)
// closes every route connection to or from node i and refuses new ones
// until Heal(i) (docs/decisions/0010-cluster-partition-proxy.md).
//
// The harness watches the cluster only through the nodes' monitoring
// endpoints (/varz, /routez, /jsz, /healthz): it never waits by sleeping.
// Start, the fault controls and the queries return errors and take a
// context; StartTest and RunTests wrap them for tests.
package natscluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"ticketrelay/testkit/e2eproc"
)

// Config says how to start a cluster. Dir is required; every other field
// has a default.
type Config struct {
	// Dir holds the nodes' configuration files (n1.conf ...), their
	// stores (n1/, ...) and their logs (logs/). Created if need be.
	Dir string
	// Nodes is the cluster size; default 3.
	Nodes int
	// Bin is the nats-server binary; "" builds it from the module's pinned
	// nats-server/v2 into Dir/bin (see Build).
	Bin string
	// Log receives one line per start, fault and election seen; default:
	// discarded.
	Log *slog.Logger
	// Name is the cluster name; default "ticketrelay".
	Name string
	// Extra is configuration text appended to every node's file, verbatim:
	// accounts and users (NKeyAuth), limits. Default: none,
	// so clients connect without credentials to the global account.
	Extra string
	// Env is added to the nodes' environment (a password Extra reads as
	// $VAR).
	Env []string
	// Render, if set, writes node a's configuration instead of the
	// harness (for configuration files kept elsewhere, such as
	// deploy/nats/cluster/); it must use every address of a. Extra is
	// not appended to what it returns.
	Render func(a NodeAddrs) (string, error)
	// ReadyTimeout bounds Start's wait for the cluster to form (WaitReady);
	// default 90s.
	ReadyTimeout time.Duration
}

func (c Config) withDefaults() Config {
	c.Nodes = cmp.Or(c.Nodes, 3)
	c.Name = cmp.Or(c.Name, "ticketrelay")
	c.ReadyTimeout = cmp.Or(c.ReadyTimeout, 90*time.Second)
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.Dir == "" {
		return errors.New("natscluster: Config.Dir is required")
	}
	if c.Nodes < 1 {
		return fmt.Errorf("natscluster: Config.Nodes = %d, want at least 1", c.Nodes)
	}
	return nil
}

// Cluster is a running cluster. Node indexes are 0-based: node i is named
// "n<i+1>". Its methods may be called from any goroutine.
type Cluster struct {
	cfg    Config
	logDir string
	fab    *fabric
	hc     *http.Client
	nodes  []*node

	closeOnce sync.Once
}

// node is one member; mu guards its process state.
type node struct {
	addrs   NodeAddrs
	conf    string // path of its configuration file
	proxy   *proxy
	mu      sync.Mutex
	proc    *e2eproc.Proc
	stopped bool // SIGSTOPped
	runs    int  // incarnations started
}

// Start writes every node's configuration to cfg.Dir, starts the route
// proxies and the nodes, and waits until the cluster is ready (WaitReady).
// On error nothing it started is left running.
//
// A node's ports are picked free and released before the node binds them,
// so another process (a parallel test) may take one in between: a start
// that fails so is made again on other ports, with new stores, up to
// startAttempts times.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		c, err := start(ctx, cfg)
		if err == nil || attempt == startAttempts || ctx.Err() != nil || !strings.Contains(err.Error(), "address already in use") {
			return c, err
		}
		cfg.Log.Warn("nats cluster: a port was taken before its node bound it; starting again on other ports", "attempt", attempt, "err", err)
		for i := range cfg.Nodes {
			if err := os.RemoveAll(filepath.Join(cfg.Dir, nodeName(i))); err != nil {
				return nil, err
			}
		}
	}
}

// startAttempts bounds Start's tries when a port was taken.
const startAttempts = 3

// freeAddr picks a loopback address for one of a node's listeners.
var freeAddr = e2eproc.FreeAddr

func nodeName(i int) string { return fmt.Sprintf("n%d", i+1) }

func start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	c := &Cluster{
		cfg: cfg, logDir: filepath.Join(cfg.Dir, "logs"), fab: newFabric(),
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 10 * time.Second}},
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		return nil, err
	}
	if c.cfg.Bin == "" {
		if c.cfg.Bin, err = Build(ctx, filepath.Join(cfg.Dir, "bin")); err != nil {
			return nil, err
		}
	}
	for i := range cfg.Nodes {
		n, err := c.newNode(i)
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		n.addrs.Routes = c.routesFor(n.addrs.Index)
		if err := c.writeConf(n); err != nil {
			return nil, err
		}
	}
	// Launch waits for each node's client port, which a node opens only
	// after JetStream is up; starting them one after the other costs
	// little, since the cluster forms once the last one is there.
	for i := range c.nodes {
		if err := c.launch(ctx, i); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		return nil, err
	}
	c.cfg.Log.Info("nats cluster ready", "nodes", cfg.Nodes, "urls", c.ClientURLs(), "dir", cfg.Dir)
	return c, nil
}

func (c *Cluster) newNode(i int) (*node, error) {
	var addrs [3]string // client, HTTP, route
	for k := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		addrs[k] = a
	}
	p, err := startProxy(c.fab, i, addrs[2])
	if err != nil {
		return nil, err
	}
	name := nodeName(i)
	n := &node{
		addrs: NodeAddrs{
			Index: i, Name: name, Cluster: c.cfg.Name,
			Client: addrs[0], HTTP: addrs[1], Route: addrs[2], Advertise: p.Addr(),
			StoreDir: filepath.Join(c.cfg.Dir, name),
		},
		conf:  filepath.Join(c.cfg.Dir, name+".conf"),
		proxy: p,
	}
	return n, nil
}

// routesFor lists the proxies of every node but i.
func (c *Cluster) routesFor(i int) []string {
	var routes []string
	for j, n := range c.nodes {
		if j != i {
			routes = append(routes, "nats-route://"+n.proxy.Addr())
		}
	}
	return routes
}

func (c *Cluster) writeConf(n *node) error {
	text := render(n.addrs, c.cfg.Extra)
	if c.cfg.Render != nil {
		var err error
		if text, err = c.cfg.Render(n.addrs); err != nil {
			return fmt.Errorf("natscluster: rendering %s: %w", n.addrs.Name, err)
		}
	}
	return os.WriteFile(n.conf, []byte(text), 0o644)
}

// launch starts node i's next incarnation and learns its server id.
func (c *Cluster) launch(ctx context.Context, i int) error {
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && !n.proc.Exited() {
		return fmt.Errorf("natscluster: %s is running", n.addrs.Name)
	}
	n.runs++
	name := n.addrs.Name
	if n.runs > 1 {
		name = fmt.Sprintf("%s.%d", name, n.runs)
	}
	p, err := e2eproc.Launch(ctx, c.logDir, e2eproc.Spec{
		Name: name, Bin: c.cfg.Bin, Args: []string{"-c", n.conf}, Env: c.cfg.Env,
		TCPAddr: n.addrs.Client, ServeTimeout: c.cfg.ReadyTimeout,
	})
	if err != nil {
		return fmt.Errorf("natscluster: starting %s: %w", n.addrs.Name, err)
	}
	n.proc, n.stopped = p, false
	// Started means this node answers on both its ports. Launch saw the
	// client port accept, but the node opens its monitoring port first and
	// dies if another process took the client port meanwhile, which then
	// still accepts: the INFO sent there must carry this node's server id.
	var v varz
	err = poll(ctx, n.addrs.Name+"'s ports", func() error {
		if p.Exited() {
			return fmt.Errorf("natscluster: %s exited: %s", n.addrs.Name, p.Tail(400))
		}
		if v.ID == "" {
			if err := getJSON(ctx, c.hc, n.addrs.HTTP, "/varz", &v); err != nil {
				return notYet("%v", err)
			}
		}
		if v.Name != n.addrs.Name {
			return fmt.Errorf("natscluster: %s's monitoring port %s is another server's (%s): address already in use", n.addrs.Name, n.addrs.HTTP, v.Name)
		}
		id, err := clientServerID(ctx, n.addrs.Client)
		switch {
		case err != nil:
			return notYet("%v", err)
		case id != v.ID:
			return notYet("%s answers for server %s, not %s", n.addrs.Client, id, v.ID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("natscluster: %s: %w", n.addrs.Name, err)
	}
	c.fab.learn(i, v.ID)
	c.cfg.Log.Info("nats node started", "node", n.addrs.Name, "pid", p.Pid(), "client", n.addrs.Client,
		"route", n.addrs.Route, "proxy", n.addrs.Advertise, "server_id", v.ID, "log", filepath.Join(c.logDir, name+".log"))
	return nil
}

func (c *Cluster) node(i int) (*node, error) {
	if i < 0 || i >= len(c.nodes) {
		return nil, fmt.Errorf("natscluster: no node %d in a cluster of %d", i, len(c.nodes))
	}
	return c.nodes[i], nil
}

// Size is the number of nodes.
func (c *Cluster) Size() int { return len(c.nodes) }

// Name is node i's server_name ("n<i+1>").
func (c *Cluster) Name(i int) string { return c.nodes[i].addrs.Name }

// Addrs is what the harness chose for node i.
func (c *Cluster) Addrs(i int) NodeAddrs { return c.nodes[i].addrs }

// ConfigFile is the path of node i's configuration file.
func (c *Cluster) ConfigFile(i int) string { return c.nodes[i].conf }

// URL is node i's client URL ("nats://127.0.0.1:port").
func (c *Cluster) URL(i int) string { return "nats://" + c.nodes[i].addrs.Client }

// ClientURLs is every node's client URL, comma-separated, for nats.Connect.
func (c *Cluster) ClientURLs() string {
	urls := make([]string, len(c.nodes))
	for i := range c.nodes {
		urls[i] = c.URL(i)
	}
	return strings.Join(urls, ",")
}

// Index is the index of the node named name, or -1.
func (c *Cluster) Index(name string) int {
	for i, n := range c.nodes {
		if n.addrs.Name == name {
			return i
		}
	}
	return -1
}

// Running reports whether node i's process is alive (it may be stopped).
func (c *Cluster) Running(i int) bool {
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && !n.proc.Exited()
}

// Stopped reports whether node i is SIGSTOPped.
func (c *Cluster) Stopped(i int) bool {
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stopped && n.proc != nil && !n.proc.Exited()
}

// Partitioned reports whether node i's routes are cut.
func (c *Cluster) Partitioned(i int) bool { return c.fab.isCut(i) }

// Kill sends node i SIGKILL and waits for it to exit.
func (c *Cluster) Kill(i int) error {
	n, err := c.node(i)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || n.proc.Exited() {
		return fmt.Errorf("natscluster: %s is not running", n.addrs.Name)
	}
	n.proc.Kill9()
	<-n.proc.Done()
	n.stopped = false
	c.cfg.Log.Info("nats node killed (SIGKILL)", "node", n.addrs.Name)
	return nil
}

// Stop sends node i SIGSTOP: it keeps its sockets, which accept in the
// kernel and are never read, as a hung host's would.
func (c *Cluster) Stop(i int) error { return c.signal(i, syscall.SIGSTOP) }

// Cont sends node i SIGCONT after Stop.
func (c *Cluster) Cont(i int) error { return c.signal(i, syscall.SIGCONT) }

func (c *Cluster) signal(i int, sig syscall.Signal) error {
	n, err := c.node(i)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || n.proc.Exited() {
		return fmt.Errorf("natscluster: %s is not running", n.addrs.Name)
	}
	if err := syscall.Kill(n.proc.Pid(), sig); err != nil {
		return fmt.Errorf("natscluster: %s to %s: %w", sig, n.addrs.Name, err)
	}
	n.stopped = sig == syscall.SIGSTOP
	c.cfg.Log.Info("nats node signalled", "node", n.addrs.Name, "signal", sig.String())
	return nil
}

// Restart starts node i again, on the same ports and store, after Kill
// (or after it died). It returns once the node serves clients; WaitReady
// says when it has rejoined.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if _, err := c.node(i); err != nil {
		return err
	}
	return c.launch(ctx, i)
}

// Wipe deletes node i's store while it is not running, as if its disk
// were lost for good; Restart then starts it empty, and the cluster
// replicates its streams to it again.
func (c *Cluster) Wipe(i int) error {
	n, err := c.node(i)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && !n.proc.Exited() {
		return fmt.Errorf("natscluster: %s is running: Kill it before Wipe", n.addrs.Name)
	}
	if err := os.RemoveAll(n.addrs.StoreDir); err != nil {
		return fmt.Errorf("natscluster: wiping %s: %w", n.addrs.Name, err)
	}
	c.cfg.Log.Info("nats node store wiped", "node", n.addrs.Name, "store", n.addrs.StoreDir)
	return nil
}

// Partition cuts node i's routes: every route connection to or from it is
// closed and new ones are refused until Heal. Its client port stays
// reachable.
func (c *Cluster) Partition(i int) error {
	if _, err := c.node(i); err != nil {
		return err
	}
	c.fab.setCut(i, true)
	c.cfg.Log.Info("nats node partitioned", "node", c.Name(i))
	return nil
}

// Heal lets node i's routes form again after Partition.
func (c *Cluster) Heal(i int) error {
	if _, err := c.node(i); err != nil {
		return err
	}
	c.fab.setCut(i, false)
	c.cfg.Log.Info("nats node healed", "node", c.Name(i))
	return nil
}

// LogDir is where every incarnation's log is (n1.log, n1.2.log, ...).
func (c *Cluster) LogDir() string { return c.logDir }

// Close kills every node (SIGKILL, stopped ones included) and the proxies,
// and waits for the processes to exit. It reports nodes that had exited
// without being asked.
func (c *Cluster) Close() error {
	var errs []error
	c.closeOnce.Do(func() {
		for _, n := range c.nodes {
			n.mu.Lock()
			if p := n.proc; p != nil {
				if p.Exited() && !p.ExitExpected() {
					errs = append(errs, fmt.Errorf("natscluster: %s exited by itself: %v: %s", n.addrs.Name, p.Err(), p.Tail(1500)))
				}
				p.Kill9()
				<-p.Done()
			}
			n.mu.Unlock()
		}
		c.fab.close()
		for _, n := range c.nodes {
			n.proxy.close()
		}
		c.hc.CloseIdleConnections()
	})
	return errors.Join(errs...)
}
