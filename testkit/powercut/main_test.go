package powercut_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"ticketrelay/testkit/testio"
)

// childEnv makes the test binary a child process of a test (the real
// component under a kill -9): its value names what the child runs.
//
// Whatever maps a file of the mount runs in a child: a page fault on the
// mount is not a system call to the Go runtime, so a goroutine of the
// serving process blocked in one cannot be stopped for a garbage
// collection, which then waits for it while the goroutines that would
// answer the fault wait for the collection.
const childEnv = "POWERCUT_TEST_CHILD"

func TestMain(m *testing.M) {
	switch kind := os.Getenv(childEnv); kind {
	case "":
		os.Exit(m.Run())
	case "ledger":
		os.Exit(childLedger())
	case "ledger-check":
		os.Exit(childCheckLedger())
	case "nats":
		os.Exit(childNATS())
	case "mmap":
		os.Exit(childMmap())
	default:
		fmt.Fprintf(os.Stderr, "powercut test child: unknown kind %q\n", kind)
		os.Exit(2)
	}
}

// child is the test binary re-run as a component. Its stdout is read line by
// line into lines (closed when the child's stdout closes: it has exited).
type child struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *testio.Buffer
	once   sync.Once
}

// startChild runs kind with env added; it is SIGKILLed at cleanup if still
// running (register it after powercut.MountT, so it dies before the unmount).
func startChild(t *testing.T, kind string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+kind), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 1<<16), stderr: &testio.Buffer{}}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("%s child stderr:\n%s", kind, c.stderr.String())
		}
	})
	return c
}

// next returns the child's next line, or fails t after timeout or if the
// child exits.
func (c *child) next(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatalf("child exited: %v\nstderr:\n%s", c.wait(), c.stderr.String())
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("no line from the child in %s\nstderr:\n%s", timeout, c.stderr.String())
		return ""
	}
}

// kill SIGKILLs the child and returns the lines it had written and the
// parent had not yet read: whatever it wrote before it died is in the pipe.
func (c *child) kill() []string {
	var rest []string
	c.once.Do(func() {
		c.cmd.Process.Signal(syscall.SIGKILL)
		for l := range c.lines {
			rest = append(rest, l)
		}
		c.cmd.Wait()
	})
	return rest
}

func (c *child) wait() error {
	for range c.lines {
	}
	return c.cmd.Wait()
}
