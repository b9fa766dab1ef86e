package torture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"ticketrelay/internal/failpoint"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/powercut"
)

// Components of the system under test.
const (
	CompFront      = "mcp-front"
	CompDispatcher = "dispatcher"
	CompNATS       = "nats-server"
)

// cluster runs the three processes of the system under test and restarts
// them on the same addresses.
type cluster struct {
	cfg        Config
	logDir     string
	dataDir    string
	dbPath     string
	configPath string
	natsConf   string
	natsAddr   string
	natsStore  string
	pc         *powercut.FS // the mount of the data and the store (power-cut mode), or nil
	secrets    []string
	h          *history
	log        *slog.Logger

	mu        sync.Mutex
	frontAddr string // fixed by the first start
	procs     map[string]*e2eproc.Proc
	armed     map[string]string // failpoints of the running instance
	instances map[string]int
}

// newCluster prepares a cluster whose data directory and JetStream store are
// under cfg.Dir, or on pc's mount if pc is not nil.
func newCluster(cfg Config, pc *powercut.FS, configYAML string, secrets []string, h *history) (*cluster, error) {
	root := cfg.Dir
	if pc != nil {
		root = pc.Mountpoint()
	}
	c := &cluster{
		cfg: cfg, logDir: filepath.Join(cfg.Dir, "logs"), dataDir: filepath.Join(root, "data"),
		natsStore: filepath.Join(root, "nats"), pc: pc, secrets: secrets, h: h, log: cfg.Log,
		procs: map[string]*e2eproc.Proc{}, armed: map[string]string{}, instances: map[string]int{},
	}
	dirs := []string{c.logDir, c.dataDir}
	if pc != nil {
		// Two levels the processes make, below a root the harness syncs
		// (natsjs.SyncStoreDirs syncs the store's parent): the cuts check
		// that they make the data directory durable themselves.
		c.dataDir = filepath.Join(root, "host", "data")
		dirs = []string{c.logDir}
	}
	c.dbPath = filepath.Join(c.dataDir, "tickets.db")
	c.configPath = filepath.Join(cfg.Dir, "ticketrelay.yaml")
	c.natsConf = filepath.Join(cfg.Dir, "nats-server.conf")
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(c.configPath, []byte(configYAML), 0o644); err != nil {
		return nil, err
	}
	addr, err := e2eproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	c.natsAddr = addr
	// sync_interval: always makes a PubAck mean "fsynced" (DESIGN.md).
	// Without it (Config.LazyNATS) nats-server syncs every two minutes.
	sync := "  sync_interval: always\n"
	if cfg.LazyNATS {
		sync = ""
	}
	conf := fmt.Sprintf("server_name: torture\nlisten: %q\njetstream {\n  store_dir: %q\n%s}\n", addr, c.natsStore, sync)
	if err := os.WriteFile(c.natsConf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return c, nil
}

// frontURL is mcp-front's streamable HTTP endpoint.
func (c *cluster) frontURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "http://" + c.frontAddr + "/mcp"
}

func (c *cluster) spec(comp, failpoints string) e2eproc.Spec {
	c.instances[comp]++
	s := e2eproc.Spec{Name: fmt.Sprintf("%s-%d", comp, c.instances[comp])}
	if failpoints != "" {
		s.Env = append(s.Env, failpoint.EnvVar+"="+failpoints)
	}
	switch comp {
	case CompNATS:
		s.Bin, s.Args, s.TCPAddr = c.cfg.NATSBin, []string{"-c", c.natsConf}, c.natsAddr
	case CompDispatcher:
		s.Bin, s.Want = c.cfg.DispatcherBin, []string{"metrics"}
		s.Env = append(s.Env, c.secrets...)
		s.Args = []string{
			"-data", c.dataDir, "-db", c.dbPath, "-nats", "nats://" + c.natsAddr, "-installation", installationName, "-config", c.configPath,
			"-metrics-listen", "127.0.0.1:0", "-lease-ttl", "2s", "-poll-interval", "10ms",
			"-retry-base", "50ms", "-retry-max", "1s", "-delivery-timeout", "1s", "-max-attempts", "1000",
			// The stream audit looks at every request 2 s after its publish or
			// last attempt, under every fault: it must never republish here.
			"-audit-after", "2s",
		}
	case CompFront:
		listen := c.frontAddr
		if listen == "" {
			listen = "127.0.0.1:0"
		}
		s.Bin, s.Want = c.cfg.FrontBin, []string{"mcp"}
		s.Args = []string{"-create-db", "-db", c.dbPath, "-listen", listen, "-metrics-listen", "127.0.0.1:0", "-config", c.configPath}
	default:
		panic("torture: unknown component " + comp)
	}
	return s
}

// start starts comp (which must not be running) with failpoints armed.
func (c *cluster) start(ctx context.Context, comp, failpoints string) error {
	c.mu.Lock()
	spec := c.spec(comp, failpoints)
	c.mu.Unlock()
	p, err := e2eproc.Launch(ctx, c.logDir, spec)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs[comp] = p
	c.armed[comp] = failpoints
	if comp == CompFront && c.frontAddr == "" {
		c.frontAddr = p.Addr("mcp")
	}
	c.log.Info("started", "process", p.Name(), "failpoints", failpoints)
	return nil
}

func (c *cluster) proc(comp string) *e2eproc.Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[comp]
}

func (c *cluster) armedOf(comp string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.armed[comp]
}

// kill SIGKILLs comp and records why.
func (c *cluster) kill(comp, cause string) {
	p := c.proc(comp)
	if p == nil || p.Exited() {
		return
	}
	p.Kill9()
	<-p.Done()
	c.h.add(Event{Kind: KindKill, Component: comp, Cause: cause, Detail: p.Name()})
	c.log.Info("killed", "process", p.Name(), "cause", cause)
}

var failpointRE = regexp.MustCompile(`failpoint (\S+): SIGKILL`)

// killTogether SIGKILLs every running process at once (a power cut), then
// waits for them all and records why.
func (c *cluster) killTogether(cause string) {
	var killed []*e2eproc.Proc
	var comps []string
	for _, comp := range []string{CompFront, CompDispatcher, CompNATS} {
		if p := c.proc(comp); p != nil && !p.Exited() {
			p.Kill9()
			killed, comps = append(killed, p), append(comps, comp)
		}
	}
	for i, p := range killed {
		<-p.Done()
		c.h.add(Event{Kind: KindKill, Component: comps[i], Cause: cause, Detail: p.Name()})
	}
	c.log.Info("killed together", "processes", comps, "cause", cause)
}

// reap records and returns the components that exited without being asked.
func (c *cluster) reap() []string {
	var dead []string
	for _, comp := range []string{CompNATS, CompDispatcher, CompFront} {
		p := c.proc(comp)
		if p == nil || !p.Exited() || p.ExitExpected() {
			continue
		}
		p.ExpectExit() // recorded once
		e := Event{Kind: KindKill, Component: comp, Detail: p.Name()}
		if m := failpointRE.FindStringSubmatch(p.Log()); m != nil && p.KilledBySIGKILL() {
			e.Cause, e.Detail = CauseFailpoint, m[1]
		} else {
			e.Cause, e.Err = CauseCrash, fmt.Sprintf("%v; stderr: %s", p.Err(), p.Tail(600))
		}
		c.h.add(e)
		c.log.Info("process died", "process", p.Name(), "cause", e.Cause, "detail", e.Detail, "err", e.Err)
		dead = append(dead, comp)
	}
	return dead
}

// stopAll stops every process with SIGINT, front first.
func (c *cluster) stopAll() error {
	return c.stop(CompFront, CompDispatcher, CompNATS)
}

// stop stops comps with SIGINT, in order.
func (c *cluster) stop(comps ...string) error {
	var errs []error
	for _, comp := range comps {
		if p := c.proc(comp); p != nil && !p.Exited() {
			if err := p.Shutdown(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killAll is the last resort of a failed run: nothing may outlive it.
func (c *cluster) killAll() {
	for _, comp := range []string{CompFront, CompDispatcher, CompNATS} {
		if p := c.proc(comp); p != nil && !p.Exited() {
			p.Kill9()
			<-p.Done()
		}
	}
}
