package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/testwait"
)

// TestFrontRefusesOpenListenWithoutAuth: mcp-front will not serve beyond
// loopback without bearer tokens unless told -insecure; it exits with a
// usage error before listening.
func TestFrontRefusesOpenListenWithoutAuth(t *testing.T) {
	bin := frontBinary(t)
	dir := t.TempDir()
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		cmd := exec.Command(bin, "-create-db", "-db", filepath.Join(dir, "t.db"), "-listen", listen, "-metrics-listen", "")
		cmd.SysProcAttr = e2eproc.DieWithParent()
		cmd.Env = append(os.Environ(), "TICKETRELAY_AUTH_TOKENS=")
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "without authentication") {
			t.Errorf("-listen %s without tokens: err %v, output %s; want exit 2 naming authentication", listen, err, out)
		}
	}
}

// TestFrontTokensFromEnv: tokens from the environment protect the real
// process; the token never appears in its logs.
func TestFrontTokensFromEnv(t *testing.T) {
	bin := frontBinary(t)
	dir := t.TempDir()
	const token = "ci-0123456789abcdef0123456789"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrFile := filepath.Join(dir, "addr.json")
	cmd := exec.CommandContext(ctx, bin, "-create-db", "-db", filepath.Join(dir, "t.db"), "-listen", "127.0.0.1:0", "-metrics-listen", "",
		"-addr-file", addrFile, "-log-level", "debug")
	cmd.SysProcAttr = e2eproc.DieWithParent()
	cmd.Env = append(os.Environ(), "TICKETRELAY_AUTH_TOKENS=ci:"+token)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var addrs map[string]string
	started := testwait.Until(20*time.Second, func() bool {
		b, err := os.ReadFile(addrFile)
		return err == nil && json.Unmarshal(b, &addrs) == nil
	})
	if !started {
		t.Fatalf("mcp-front did not start: %s", logs.String())
	}
	url := "http://" + addrs["mcp"] + "/mcp"
	post := func(auth string) int {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(""); got != http.StatusUnauthorized {
		t.Errorf("no token: HTTP %d", got)
	}
	if got := post("Bearer " + token + "x"); got != http.StatusUnauthorized {
		t.Errorf("wrong token: HTTP %d", got)
	}
	if got := post("Bearer " + token); got != http.StatusOK {
		t.Errorf("right token: HTTP %d", got)
	}
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()
	if strings.Contains(logs.String(), token) {
		t.Errorf("the token is in the logs")
	}
	if !strings.Contains(logs.String(), `subjects=[ci]`) {
		t.Errorf("startup does not name the subjects: %s", logs.String())
	}
}
