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
	secrets    []string
	h          *history
	log        *slog.Logger

	mu        sync.Mutex
	frontAddr string // fixed by the first start
	procs     map[string]*proc
	armed     map[string]string // failpoints of the running instance
	instances map[string]int
}

func newCluster(cfg Config, configYAML string, secrets []string, h *history) (*cluster, error) {
	c := &cluster{
		cfg: cfg, logDir: filepath.Join(cfg.Dir, "logs"), dataDir: filepath.Join(cfg.Dir, "data"),
		secrets: secrets, h: h, log: cfg.Log,
		procs: map[string]*proc{}, armed: map[string]string{}, instances: map[string]int{},
	}
	c.dbPath = filepath.Join(c.dataDir, "tickets.db")
	c.configPath = filepath.Join(cfg.Dir, "ticketrelay.yaml")
	c.natsConf = filepath.Join(cfg.Dir, "nats-server.conf")
	for _, d := range []string{c.logDir, c.dataDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(c.configPath, []byte(configYAML), 0o644); err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	c.natsAddr = addr
	// sync_interval: always makes a PubAck mean "fsynced" (DESIGN.md).
	conf := fmt.Sprintf("server_name: torture\nlisten: %q\njetstream {\n  store_dir: %q\n  sync_interval: always\n}\n",
		addr, filepath.Join(cfg.Dir, "nats"))
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

func (c *cluster) spec(comp, failpoints string) procSpec {
	c.instances[comp]++
	s := procSpec{name: fmt.Sprintf("%s-%d", comp, c.instances[comp])}
	if failpoints != "" {
		s.env = append(s.env, failpoint.EnvVar+"="+failpoints)
	}
	switch comp {
	case CompNATS:
		s.bin, s.args, s.tcpAddr = c.cfg.NATSBin, []string{"-c", c.natsConf}, c.natsAddr
	case CompDispatcher:
		s.bin, s.addrFile, s.want = c.cfg.DispatcherBin, true, []string{"metrics"}
		s.env = append(s.env, c.secrets...)
		s.args = []string{
			"-data", c.dataDir, "-db", c.dbPath, "-nats", "nats://" + c.natsAddr, "-config", c.configPath,
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
		s.bin, s.addrFile, s.want = c.cfg.FrontBin, true, []string{"mcp"}
		s.args = []string{"-db", c.dbPath, "-listen", listen, "-metrics-listen", "127.0.0.1:0", "-config", c.configPath}
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
	p, err := startProc(ctx, c.logDir, spec)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs[comp] = p
	c.armed[comp] = failpoints
	if comp == CompFront && c.frontAddr == "" {
		c.frontAddr = p.addrs["mcp"]
	}
	c.log.Info("started", "process", p.name, "failpoints", failpoints)
	return nil
}

func (c *cluster) proc(comp string) *proc {
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
	if p == nil || p.exited() {
		return
	}
	p.kill()
	c.h.add(Event{Kind: KindKill, Component: comp, Cause: cause, Detail: p.name})
	c.log.Info("killed", "process", p.name, "cause", cause)
}

var failpointRE = regexp.MustCompile(`failpoint (\S+): SIGKILL`)

// reap records and returns the components that exited without being asked.
func (c *cluster) reap() []string {
	var dead []string
	for _, comp := range []string{CompNATS, CompDispatcher, CompFront} {
		p := c.proc(comp)
		if p == nil || !p.exited() || p.killed.Load() {
			continue
		}
		p.killed.Store(true) // recorded once
		e := Event{Kind: KindKill, Component: comp, Detail: p.name}
		if m := failpointRE.FindStringSubmatch(p.log()); m != nil && p.sigkilled() {
			e.Cause, e.Detail = CauseFailpoint, m[1]
		} else {
			e.Cause, e.Err = CauseCrash, fmt.Sprintf("%v; stderr: %s", p.waitErr, p.tail(600))
		}
		c.h.add(e)
		c.log.Info("process died", "process", p.name, "cause", e.Cause, "detail", e.Detail, "err", e.Err)
		dead = append(dead, comp)
	}
	return dead
}

// stopAll stops every process with SIGINT, front first.
func (c *cluster) stopAll() error {
	var errs []error
	for _, comp := range []string{CompFront, CompDispatcher, CompNATS} {
		if p := c.proc(comp); p != nil {
			if err := p.stop(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killAll is the last resort of a failed run: nothing may outlive it.
func (c *cluster) killAll() {
	for _, comp := range []string{CompFront, CompDispatcher, CompNATS} {
		if p := c.proc(comp); p != nil && !p.exited() {
			p.kill()
		}
	}
}
