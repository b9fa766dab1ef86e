package natscluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testBin is the nats-server that RunTests built for this test binary:
// built once per process, as building it costs seconds.
var testBin string

// RunTests builds nats-server once into a temporary directory, runs the
// tests and removes the binary. A package whose tests call StartTest calls
// it from TestMain: os.Exit(natscluster.RunTests(m)).
func RunTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ticketrelay-natscluster-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "natscluster:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	bin, err := Build(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testBin = bin
	return m.Run()
}

// StartTest starts a cluster for t (cfg.Dir defaults to a t.TempDir,
// cfg.Bin to the binary RunTests built, cfg.Log to t.Log) and registers
// its Close: every node is killed at the end of the test, which fails if a
// node had exited by itself; the nodes' logs are shown if it failed.
func StartTest(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Bin == "" {
		if testBin == "" {
			t.Fatal("natscluster: no nats-server binary: call natscluster.RunTests from TestMain, or set Config.Bin")
		}
		cfg.Bin = testBin
	}
	if cfg.Log == nil {
		cfg.Log = TestLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := Start(ctx, cfg)
	if err != nil {
		DumpLogs(t, filepath.Join(cfg.Dir, "logs"))
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			DumpLogs(t, c.LogDir())
		}
	})
	return c
}

// TestLogger is a logger that writes through t.Log.
func TestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{t}, nil))
}

type tbWriter struct{ t testing.TB }

func (w tbWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// DumpLogs logs the last 16 KiB of every log in dir.
func DumpLogs(t testing.TB, dir string) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		s := string(b)
		if len(s) > 16<<10 {
			s = "…" + s[len(s)-16<<10:]
		}
		t.Logf("----- %s -----\n%s----- end of %s -----", p, s, filepath.Base(p))
	}
}
