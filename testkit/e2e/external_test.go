package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/testkit/e2eproc"
)

// nats-server built from the module's pinned version, once.
var (
	natsServerOnce sync.Once
	natsServerBin  string
	natsServerErr  error
)

func buildNATSServer(t *testing.T) string {
	t.Helper()
	natsServerOnce.Do(func() {
		root, err := e2eproc.ModuleRoot()
		if err != nil {
			natsServerErr = err
			return
		}
		dir, err := os.MkdirTemp("", "ticketrelay-e2e-nats-")
		if err != nil {
			natsServerErr = err
			return
		}
		out := filepath.Join(dir, "nats-server")
		cmd := exec.Command("go", "build", "-o", out, "github.com/nats-io/nats-server/v2")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			natsServerErr = fmt.Errorf("building nats-server: %v\n%s", err, b)
			return
		}
		natsServerBin = out
	})
	if natsServerErr != nil {
		t.Fatal(natsServerErr)
	}
	return natsServerBin
}

// An external nats-server that comes back without its store (a lost
// volume, a re-provisioned server): while it is gone find_request says
// delivery is blocked and why; once it is back the dispatcher, never
// restarted, creates the stream and its consumer again and delivers the
// backlog, each request exactly once. The server asks for a user and
// password, which the dispatcher takes from -nats-user and the
// environment.
func TestExternalServerBackWithoutItsStore(t *testing.T) {
	bin := buildNATSServer(t)
	s := newStack(t)
	addr, err := e2eproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(s.dir, "external-nats")
	const password = "pw-e2e-3c51b0"
	conf := filepath.Join(s.dir, "nats-server.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: %q\njetstream {\n  store_dir: %q\n  sync_interval: always\n}\n"+
		"authorization {\n  user: ticketrelay\n  password: %q\n}\n", addr, store, password)), 0o600); err != nil {
		t.Fatal(err)
	}
	startNATS := func(name string) *e2eproc.Proc {
		t.Helper()
		p, err := e2eproc.Launch(context.Background(), s.dir, e2eproc.Spec{Name: name, Bin: bin, Args: []string{"-c", conf}, TCPAddr: addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				e2eproc.DumpLog(t, name, filepath.Join(s.dir, name+".log"))
			}
			if !p.Exited() {
				p.Kill9()
				<-p.Done()
			}
		})
		return p
	}
	n1 := startNATS("nats-server-1")
	disp := e2eproc.Start(t, s.dir, s.instance("dispatcher"), dispatcherBin, []string{
		"-data", s.dir, "-db", s.db, "-nats", "nats://" + addr, "-installation", "external", "-nats-user", "ticketrelay",
		"-metrics-listen", "127.0.0.1:0", "-lease-ttl", "2s", "-poll-interval", "5ms",
	}, []string{"TICKETRELAY_NATS_PASSWORD=" + password}, "metrics")
	s.startFront(t, "127.0.0.1:0")
	cs := e2eproc.Connect(t, s.url)
	mustCreate(t, cs, ticketArgs("ext-0", "before the loss"))
	waitDelivered(t, cs, 20*time.Second, "ext-0")

	// The server goes, with its store.
	n1.Kill9()
	<-n1.Done()
	if err := os.RemoveAll(store); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("ext-%d", i)
		ids = append(ids, id)
		mustCreate(t, cs, ticketArgs(id, "accepted while the broker is gone"))
	}
	var detail string
	waitFor(t, 10*time.Second, "find_request to say delivery is blocked", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := find(ctx, cs, "ext-1")
		if err != nil {
			t.Fatal(err)
		}
		detail = r.Detail
		return r.Status == "queued" && strings.Contains(r.Detail, "Delivery is blocked")
	})
	t.Logf("find_request while the broker is gone: %s", detail)
	if !strings.Contains(detail, "not connected") {
		t.Errorf("the detail does not say why: %s", detail)
	}

	back := time.Now()
	startNATS("nats-server-2")
	waitDelivered(t, cs, time.Minute, ids...)
	t.Logf("backlog of %d delivered %s after the server came back", len(ids), time.Since(back).Round(time.Millisecond))
	if disp.Exited() {
		t.Fatal("the dispatcher exited")
	}
	checkExactlyOnce(t, s, append([]string{"ext-0"}, ids...))
	if got := repairs(t, disp, "stream_missing"); got < 1 {
		t.Errorf("stream_missing repairs = %v, want >= 1", got)
	}
	mustCreate(t, cs, ticketArgs("ext-6", "after the server came back"))
	waitFor(t, 10*time.Second, "find_request to stop saying delivery is blocked", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := find(ctx, cs, "ext-6")
		if err != nil {
			t.Fatal(err)
		}
		return !strings.Contains(r.Detail, "blocked")
	})
}
