package failpoint

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	good := []struct {
		spec string
		want map[string]int64
	}{
		{"", map[string]int64{}},
		{" , ", map[string]int64{}},
		{"relay.after-publish=kill", map[string]int64{RelayAfterPublish: 1}},
		{"relay.after-publish=kill@1", map[string]int64{RelayAfterPublish: 1}},
		{"relay.after-publish=kill@3, forwarder.after-deliver=kill,", map[string]int64{RelayAfterPublish: 3, ForwarderAfterDeliver: 1}},
		{"front.after-commit=kill@1000000", map[string]int64{FrontAfterCommit: 1000000}},
	}
	for _, tc := range good {
		ps, err := parse(tc.spec)
		if err != nil {
			t.Errorf("parse(%q): %v", tc.spec, err)
			continue
		}
		got := map[string]int64{}
		for name, p := range ps {
			got[name] = p.killAt
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("parse(%q) = %v, want %v", tc.spec, got, tc.want)
		}
	}

	bad := []struct{ spec, msg string }{
		{"relay.after-publsh=kill", "unknown failpoint"},
		{"RELAY.AFTER-PUBLISH=kill", "unknown failpoint"},
		{"relay.after-publish", "unknown failpoint"},
		{"=kill", "unknown failpoint"},
		{"relay.after-publish=kill,nope=kill", "unknown failpoint"},
		{"relay.after-publish=", "unknown action"},
		{"relay.after-publish=panic", "unknown action"},
		{"relay.after-publish=kill@", "bad count"},
		{"relay.after-publish=kill@0", "bad count"},
		{"relay.after-publish=kill@-2", "bad count"},
		{"relay.after-publish=kill@two", "bad count"},
		{"relay.after-publish=kill@1.5", "bad count"},
		{"relay.after-publish=kill@99999999999999999999", "bad count"},
	}
	for _, tc := range bad {
		ps, err := parse(tc.spec)
		if err == nil {
			t.Errorf("parse(%q) = %v, want an error", tc.spec, ps)
			continue
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("parse(%q) error %q, want %q", tc.spec, err, tc.msg)
		}
	}
}

// TestHitUnarmedIsANoOp: until the armed flag is set, Hit touches no
// failpoint, even one that is parsed (the state between parse and
// armed.Store in Init): it counts no hit, so it can never reach a kill.
// Once armed, the same calls count, which shows the check can fail.
func TestHitUnarmedIsANoOp(t *testing.T) {
	if armed.Load() {
		t.Skip("failpoints armed in this process")
	}
	ps, err := parse("relay.after-publish=kill@1000000")
	if err != nil {
		t.Fatal(err)
	}
	saved := points
	points = ps
	t.Cleanup(func() { armed.Store(false); points = saved })
	p := ps[RelayAfterPublish]

	for range 3 {
		Hit(RelayAfterPublish)
		Hit(ForwarderAfterDeliver)
	}
	if n := p.hits.Load(); n != 0 {
		t.Fatalf("unarmed: %d hits counted on %s, want 0", n, RelayAfterPublish)
	}

	armed.Store(true)
	Hit(RelayAfterPublish)
	Hit(ForwarderAfterDeliver) // not in the spec: ignored, counts nothing
	if n := p.hits.Load(); n != 1 {
		t.Fatalf("armed: %d hits counted on %s after one Hit, want 1", n, RelayAfterPublish)
	}
}

const childEnv = "FAILPOINT_TEST_CHILD"

// TestKillChild is the subprocess of TestKillOnNthHit; it does nothing in
// a normal run.
func TestKillChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("subprocess of TestKillOnNthHit")
	}
	if err := Init(); err != nil {
		fmt.Println("init error:", err)
		os.Exit(3)
	}
	Hit(ForwarderAfterDeliver) // not armed
	Hit(RelayAfterPublish)
	fmt.Println("survived hit 1")
	Hit(RelayAfterPublish)
	fmt.Println("survived hit 2")
	os.Exit(0)
}

func runChild(t *testing.T, spec string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1", EnvVar+"="+spec)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 10 * time.Second
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("child did not exit")
	}
	return out.String(), errb.String(), err
}

func TestKillOnNthHit(t *testing.T) {
	stdout, stderr, err := runChild(t, "relay.after-publish=kill@2")
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child exited with %v, want death by signal\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL\nstdout: %s\nstderr: %s", ee, stdout, stderr)
	}
	if !strings.Contains(stdout, "survived hit 1") {
		t.Fatalf("child died before the second hit:\nstdout: %s\nstderr: %s", stdout, stderr)
	}
	if strings.Contains(stdout, "survived hit 2") {
		t.Fatalf("child survived the second hit:\n%s", stdout)
	}
	if !strings.Contains(stderr, "failpoint relay.after-publish: SIGKILL") {
		t.Errorf("stderr does not announce the kill: %q", stderr)
	}
}

func TestChildWithoutKillExitsCleanly(t *testing.T) {
	stdout, stderr, err := runChild(t, "relay.after-publish=kill@3")
	if err != nil {
		t.Fatalf("child with kill@3 and two hits: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	if !strings.Contains(stdout, "survived hit 2") {
		t.Fatalf("stdout %q", stdout)
	}
	_, _, err = runChild(t, "relay.after-publish=explode")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("child with a bad spec: %v, want Init's error (exit 3)", err)
	}
}
