package e2eproc

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ticketrelay/testkit/testwait"
)

// helperEnv turns the test binary into one of the processes of
// TestLaunchedProcessDiesWithItsParent: "parent" launches a "server" and
// prints its pid; "server" listens on E2EPROC_TEST_ADDR until killed.
const helperEnv = "E2EPROC_TEST_HELPER"

func TestHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "server":
		ln, err := net.Listen("tcp", os.Getenv("E2EPROC_TEST_ADDR"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "listen:", err)
			os.Exit(2)
		}
		defer ln.Close()
		select {} // until killed
	case "parent":
		addr, err := FreeAddr()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		p, err := Launch(context.Background(), os.Getenv("E2EPROC_TEST_DIR"), Spec{
			Name: "server", Bin: os.Args[0], Args: []string{"-test.run=^TestHelperProcess$"},
			Env: []string{helperEnv + "=server", "E2EPROC_TEST_ADDR=" + addr}, TCPAddr: addr,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "launch:", err)
			os.Exit(2)
		}
		fmt.Printf("server pid %d\n", p.Pid())
		select {} // until killed
	default:
		t.Skip("helper process of TestLaunchedProcessDiesWithItsParent")
	}
}

// A process started by Launch dies when the process that launched it dies,
// even by SIGKILL (no cleanup runs): a killed or timed-out `go test` leaves
// no server behind.
func TestLaunchedProcessDiesWithItsParent(t *testing.T) {
	parent := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	parent.Env = append(os.Environ(), helperEnv+"=parent", "E2EPROC_TEST_DIR="+t.TempDir())
	parent.Stderr = os.Stderr
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { parent.Process.Kill(); parent.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	var pid int
	select {
	case s := <-line:
		v, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(s, "server pid ")))
		if err != nil {
			t.Fatalf("parent said %q, want the server's pid", s)
		}
		pid = v
	case <-time.After(30 * time.Second):
		t.Fatal("the parent did not launch its server within 30s")
	}
	if !alive(pid) {
		t.Fatalf("server %d not running before its parent was killed", pid)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) }) // if the test fails

	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	parent.Wait()
	if !testwait.Until(10*time.Second, func() bool { return !alive(pid) }) {
		t.Fatalf("server %d still running 10s after its parent was killed", pid)
	}
}

// alive reports whether pid is a process that has not exited (a zombie
// waiting for its new parent to reap it has exited).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}
