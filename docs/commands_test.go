package docs

// The command lines the docs give a user are run here, as written, against
// real processes: the README's curl session and its webhook walkthrough
// against mcp-front and a dispatcher started as `make run` starts them, and
// every `claude mcp add` and `claude mcp get` line of the README and of
// docs/*.md against the real Claude Code CLI (make test-docs installs the
// pinned version and sets TICKETRELAY_CLAUDE_CODE) with a throwaway HOME.
// Only ports, chosen at run time, and the placeholders NAME, URL and TOKEN
// are substituted (decision 0126).

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ticketrelay/front/mcpauth/mcpauthtest"
	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/testio"
	"ticketrelay/testkit/testwait"
)

// connected is what claude mcp get prints of a server it connected to.
const connected = "Status: ✔ Connected"

// needsAuth is what claude mcp get prints of a server that asks the user
// to sign in with an identity provider Claude Code can register with.
const needsAuth = "Status: ! Needs authentication"

// The sign-in lines: every `claude mcp add/get` line of security.md's
// section on signing in with an identity provider. They configure nothing
// but the URL and are run against an mcp-front that accepts the access
// tokens of a test issuer, not static tokens.
const signInPage, signInSection = "security.md", "## Signing in with an identity provider"

// docAddr is the address the docs give mcp-front (make run's LISTEN).
const docAddr = "127.0.0.1:8080"

var (
	buildOnce            sync.Once
	frontBin, dispBin    string
	buildErr             error
	binDir               string
	claudeEnv            = "TICKETRELAY_CLAUDE_CODE"
	inlineCode           = regexp.MustCompile("`([^`]+)`")
	shellWords           = regexp.MustCompile(`"[^"]*"|'[^']*'|\S+`)
	claudeFlagsWithValue = map[string]bool{"--transport": true, "-t": true, "--scope": true, "-s": true, "--header": true, "-H": true, "--env": true, "-e": true}
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds mcp-front and the dispatcher once, for the tests that
// run them.
func binaries(t *testing.T) (front, dispatcher string) {
	t.Helper()
	buildOnce.Do(func() {
		root, err := e2eproc.ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		if binDir, buildErr = os.MkdirTemp("", "ticketrelay-docs-bin-"); buildErr != nil {
			return
		}
		frontBin, dispBin, buildErr = e2eproc.Build(root, binDir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return frontBin, dispBin
}

// system is make run's pair of processes in dir (its DATA is dir/data),
// on ports chosen at run time; extra flags go to mcp-front.
type system struct {
	dir, url string
}

func startSystem(t *testing.T, dir string, frontArgs ...string) system {
	t.Helper()
	return startSystemEnv(t, dir, nil, frontArgs...)
}

// startSystemEnv is startSystem with env added to both processes'
// environment, as make run passes its own on.
func startSystemEnv(t *testing.T, dir string, env []string, frontArgs ...string) system {
	t.Helper()
	front, disp := binaries(t)
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	e2eproc.Start(t, dir, "dispatcher", disp, []string{"-data", data, "-nats-listen", "127.0.0.1:0", "-metrics-listen", ""}, env, "nats")
	f := e2eproc.Start(t, dir, "mcp-front", front, append([]string{"-create-db", "-db", filepath.Join(data, "tickets.db"),
		"-listen", "127.0.0.1:0", "-metrics-listen", ""}, frontArgs...), env, "mcp")
	return system{dir: dir, url: "http://" + f.Addr("mcp") + "/mcp"}
}

// shellBlock returns the first ```sh block of a Markdown file's section
// under heading.
func shellBlock(t *testing.T, page, heading string) string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s: no heading %q", page, heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatalf("%s, %q: no sh block", page, heading)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

func bash(t *testing.T, dir, script string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v running:\n%s\noutput:\n%s", err, script, out)
	}
	return string(out)
}

// The README's curl session, run as written against make run's processes:
// create_ticket is queued, find_request finds it, the ticket is delivered
// by the local target, and the session is deleted at the end.
func TestREADMECurlSession(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("the README's curl session needs curl: install it")
	}
	block := shellBlock(t, "../README.md", "## Without Claude Code: curl")
	if !strings.Contains(block, docAddr) {
		t.Fatalf("the curl session does not name make run's address %s:\n%s", docAddr, block)
	}
	s := startSystem(t, t.TempDir())
	script := strings.ReplaceAll(block, "http://"+docAddr+"/mcp", s.url) + `
echo "session=$SID"
mcp -o /dev/null -w 'after delete: %{http_code}\n' -H "Mcp-Session-Id: $SID" -d '{"jsonrpc":"2.0","id":9,"method":"tools/list"}'
`
	out := bash(t, s.dir, script)
	for _, want := range []string{
		`"status":"queued"`, `"request_id":"curl-1"`,
		"after delete: 404",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("the session's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "session=\n") {
		t.Fatalf("no Mcp-Session-Id read from initialize's answer:\n%s", out)
	}
	if n := strings.Count(out, `"request_id":"curl-1"`); n < 2 {
		t.Fatalf("create_ticket and find_request should both name curl-1 (%d times):\n%s", n, out)
	}
	if !regexp.MustCompile(`"status":"(queued|published|delivered)","ticket_id"`).MatchString(out) {
		t.Fatalf("find_request's answer has no status of an accepted ticket:\n%s", out)
	}
	jsonl := filepath.Join(s.dir, "data", "tickets.jsonl")
	testwait.For(t, 30*time.Second, "the ticket in data/tickets.jsonl", func() bool {
		b, _ := os.ReadFile(jsonl)
		return strings.Contains(string(b), `"curl-1"`)
	})
	// The same create_ticket line again is a replay.
	create := ""
	for l := range strings.SplitSeq(block, "\n") {
		if strings.Contains(l, `"create_ticket"`) {
			create = l
		}
	}
	again := bash(t, s.dir, strings.ReplaceAll(block, "http://"+docAddr+"/mcp", s.url)+create+"\n")
	if !strings.Contains(again, `"replayed":true`) {
		t.Fatalf("create_ticket again in a new session: want replayed:\n%s", again)
	}
}

// The README's webhook walkthrough, run as written in a fresh directory:
// the receiver's line, then make run's environment from the second line
// (make run itself is its two processes, started here with those
// variables), then the curl session. The ticket reaches the receiver
// signed with the secret both sides read, its external_url serves it, and
// after the receiver's line is run again (a restart) the next ticket is
// delivered too: the same secret, no 401.
func TestREADMEWebhookWalkthrough(t *testing.T) {
	block := shellBlock(t, "../README.md", "## One target, end to end: a webhook")
	const goRun, makeRun = "go run ./examples/webhook-receiver", "make run"
	var receiverLine, runLine string
	for l := range strings.SplitSeq(strings.TrimSpace(block), "\n") {
		switch {
		case strings.HasPrefix(l, goRun):
			receiverLine = l
		case strings.Contains(l, makeRun):
			runLine = l
		}
	}
	if receiverLine == "" || runLine == "" {
		t.Fatalf("the walkthrough has no %q line and %q line:\n%s", goRun, makeRun, block)
	}
	root, err := e2eproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	receiver := filepath.Join(work, "webhook-receiver")
	build := exec.Command("go", "build", "-o", receiver, "./examples/webhook-receiver")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the receiver: %v\n%s", err, out)
	}
	// The receiver listens where examples/webhook.yaml points; here on a
	// port chosen now, in a copy of the file that says so.
	yaml, err := os.ReadFile(filepath.Join(root, "examples", "webhook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := e2eproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	const docEndpoint = "http://127.0.0.1:9000/tickets"
	if !strings.Contains(string(yaml), docEndpoint) || !strings.Contains(receiverLine, "127.0.0.1:9000") {
		t.Fatalf("examples/webhook.yaml's endpoint or the README's line is not %s", docEndpoint)
	}
	if err := os.MkdirAll(filepath.Join(work, "examples"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "examples", "webhook.yaml"), []byte(strings.ReplaceAll(string(yaml), docEndpoint, "http://"+addr+"/tickets")), 0o600); err != nil {
		t.Fatal(err)
	}
	startReceiver := func(name string) *e2eproc.Proc {
		line := strings.Replace(receiverLine, goRun, receiver+" -listen "+addr, 1)
		p, err := e2eproc.Launch(context.Background(), work, e2eproc.Spec{Name: name, Bin: "bash", Args: []string{"-c", line}, TCPAddr: addr, Dir: work})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !p.Exited() {
				p.Kill9()
				<-p.Done()
			}
		})
		return p
	}
	first := startReceiver("receiver-1")
	secretFile := filepath.Join(work, "data", "webhook-receiver", "secret")
	secret, err := os.ReadFile(secretFile)
	if err != nil {
		t.Fatalf("the receiver made no secret file: %v", err)
	}

	// make run's environment, as the second line sets it.
	prefix, _, _ := strings.Cut(runLine, makeRun)
	envOut := bash(t, work, prefix+" env")
	var env []string
	for l := range strings.SplitSeq(envOut, "\n") {
		switch name, value, _ := strings.Cut(l, "="); name {
		case "WEBHOOK_SECRET":
			env = append(env, l)
		case "TICKETRELAY_CONFIG": // relative to make run's directory, work here
			env = append(env, name+"="+filepath.Join(work, value))
		}
	}
	if len(env) != 2 || !slices.Contains(env, "WEBHOOK_SECRET="+strings.TrimSpace(string(secret))) ||
		!slices.Contains(env, "TICKETRELAY_CONFIG="+filepath.Join(work, "examples", "webhook.yaml")) {
		t.Fatalf("the make run line sets %v; want TICKETRELAY_CONFIG and the receiver's secret", env)
	}
	s := startSystemEnv(t, work, env)
	session := strings.ReplaceAll(shellBlock(t, "../README.md", "## Without Claude Code: curl"), "http://"+docAddr+"/mcp", s.url)
	// The session's own lines, without create_ticket: to ask find_request.
	var find strings.Builder
	for l := range strings.SplitSeq(session, "\n") {
		if !strings.Contains(l, `"create_ticket"`) {
			find.WriteString(l + "\n")
		}
	}
	delivered := func(id string) {
		t.Helper()
		bash(t, work, strings.ReplaceAll(session, "curl-1", id))
		testwait.For(t, 30*time.Second, id+" delivered to the receiver", func() bool {
			return strings.Contains(bash(t, work, strings.ReplaceAll(find.String(), "curl-1", id)), `"status":"delivered"`)
		})
	}
	delivered("walk-1")
	b, err := os.ReadFile(filepath.Join(work, "data", "webhook-receiver", "tickets.jsonl"))
	if err != nil || strings.Count(string(b), `"request_id":"walk-1"`) != 1 {
		t.Fatalf("the receiver's tickets.jsonl: %v\n%s\nwant walk-1 once", err, b)
	}
	resp, err := http.Get("http://" + addr + "/tickets/T-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the ticket's external_url answers %d", resp.StatusCode)
	}

	// The receiver's line again, after a restart: the same secret.
	first.Kill9()
	<-first.Done()
	startReceiver("receiver-2")
	if again, err := os.ReadFile(secretFile); err != nil || string(again) != string(secret) {
		t.Fatalf("the secret changed when the receiver's line ran again (%v)", err)
	}
	delivered("walk-2")
}

// claudeLine is a `claude mcp` command line given in a doc, under the
// page's `## ` heading section.
type claudeLine struct {
	where, section, line string
}

// signIn reports whether l stands in security.md's sign-in section.
func (l claudeLine) signIn() bool {
	return strings.HasPrefix(l.where, signInPage+":") && l.section == signInSection
}

// claudeLines collects every `claude mcp add` and `claude mcp get` line of
// the README and docs/*.md: lines of code blocks and inline code spans. A
// span that names the command without arguments is prose.
func claudeLines(t *testing.T) []claudeLine {
	t.Helper()
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	var lines []claudeLine
	for _, page := range append([]string{"../README.md"}, pages...) {
		f, err := os.Open(page)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		inBlock, n, section := false, 0, ""
		var span strings.Builder // an inline span may wrap onto the next line
		for sc.Scan() {
			n++
			l := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				inBlock = !inBlock
				continue
			}
			if inBlock {
				if c := strings.TrimSpace(l); strings.HasPrefix(c, "claude mcp ") {
					lines = append(lines, claudeLine{page + ":" + strconv.Itoa(n), section, c})
				}
				continue
			}
			if strings.HasPrefix(l, "## ") {
				section = l
			}
			span.WriteString(" " + strings.TrimSpace(l))
			text := span.String()
			if strings.Count(text, "`")%2 == 1 {
				continue // a span goes on
			}
			span.Reset()
			for _, m := range inlineCode.FindAllStringSubmatch(text, -1) {
				c := strings.TrimSpace(m[1])
				if strings.HasPrefix(c, "claude mcp add ") || strings.HasPrefix(c, "claude mcp get ") {
					lines = append(lines, claudeLine{page + ":" + strconv.Itoa(n), section, c})
				}
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return lines
}

// serverName is the NAME of a `claude mcp add` or `claude mcp get` line:
// its first argument that is neither a flag nor a flag's value.
func serverName(line string) string {
	words := shellWords.FindAllString(line, -1)
	for i := 3; i < len(words); i++ {
		switch w := words[i]; {
		case w == "--":
			return ""
		case claudeFlagsWithValue[w]:
			i++
		case !strings.HasPrefix(w, "-"):
			return w
		}
	}
	return ""
}

// Every `claude mcp add` / `claude mcp get` line of the docs, run as
// written with Claude Code (make test-docs), connects: `claude mcp get`
// says connected for each server added, and the README's example of
// its output is what it prints. The bearer-token line is checked against
// an mcp-front that requires the token, and the same line with another
// token must not connect. The sign-in lines are run against an mcp-front
// that signs users in with a test issuer (-auth-resource, -oauth-issuer):
// there `claude mcp get` says the server needs authentication.
func TestClaudeCodeCommandLines(t *testing.T) {
	claude := os.Getenv(claudeEnv)
	if claude == "" {
		t.Skip(claudeEnv + " is not set: make test-docs installs Claude Code and runs this test")
	}
	lines := claudeLines(t)
	var adds, gets int
	for _, l := range lines {
		if strings.HasPrefix(l.line, "claude mcp add ") {
			adds++
		} else {
			gets++
		}
	}
	if adds < 3 || gets < 1 {
		t.Fatalf("found %d add and %d get lines in the docs; want the README's http and stdio lines, security.md's token line and a get: %+v", adds, gets, lines)
	}
	signInAdds := 0
	for _, l := range lines {
		if !l.signIn() || !strings.HasPrefix(l.line, "claude mcp add ") {
			continue
		}
		signInAdds++
		// Claude Code asks for sign-in over SSE too, though mcp-front
		// speaks streamable HTTP only: the transport is checked here.
		words := shellWords.FindAllString(l.line, -1)
		transport := slices.IndexFunc(words, func(w string) bool { return w == "--transport" || w == "-t" })
		if transport < 0 || transport+1 == len(words) || words[transport+1] != "http" {
			t.Errorf("%s: %q: mcp-front is added with --transport http", l.where, l.line)
		}
		if slices.ContainsFunc(words, func(w string) bool { return w == "--header" || w == "-H" || w == "TOKEN" }) {
			t.Errorf("%s: %q: a sign-in line configures nothing but the URL", l.where, l.line)
		}
	}
	if signInAdds == 0 {
		t.Fatalf("%s has no `claude mcp add` line under %q: the line that adds a server users sign in to", signInPage, signInSection)
	}

	work := t.TempDir() // make run's directory: bin/, data/
	s := startSystem(t, work)
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	front, _ := binaries(t)
	if err := os.Symlink(front, filepath.Join(work, "bin", "mcp-front")); err != nil {
		t.Fatal(err)
	}
	const token = "docs-test-token-0123456789abcdef"
	authDir := t.TempDir()
	tokens := filepath.Join(authDir, "tokens")
	if err := os.WriteFile(tokens, []byte("agent:"+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := startSystem(t, authDir, "-auth-tokens-file", tokens)

	// The sign-in example's mcp-front: its -auth-resource is its own URL,
	// so its port is chosen before it starts (the later -listen wins).
	issuer := mcpauthtest.NewIssuer(t)
	signInAddr, err := e2eproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	signInURL := "http://" + signInAddr + "/mcp"
	signInFront := startSystem(t, t.TempDir(), "-listen", signInAddr,
		"-auth-resource", signInURL, "-oauth-issuer", issuer.URL(), "-oauth-scopes", "tickets")
	if signInFront.url != signInURL {
		t.Fatalf("the sign-in mcp-front serves %s, want %s", signInFront.url, signInURL)
	}

	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=" + filepath.Dir(claude) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "XDG_CONFIG_HOME=" + filepath.Join(home, ".config")}
	atDocAddr := func(text string) string { return strings.ReplaceAll(text, "http://"+docAddr+"/mcp", s.url) }
	substitute := func(line, name, url, tok string) string {
		line = atDocAddr(line)
		line = regexp.MustCompile(`\bNAME\b`).ReplaceAllString(line, name)
		line = regexp.MustCompile(`\bURL\b`).ReplaceAllString(line, url)
		return regexp.MustCompile(`\bTOKEN\b`).ReplaceAllString(line, tok)
	}
	// A line as run, and what claude mcp get must then say: the sign-in
	// lines name a server of their own, the sign-in mcp-front.
	asRun := func(l claudeLine) (run, want string) {
		if l.signIn() {
			return substitute(l.line, "tickets-signin", signInFront.url, ""), needsAuth
		}
		return substitute(l.line, "tickets-auth", auth.url, token), connected
	}
	get := func(name string) string { return bash(t, work, "claude mcp get "+name, env...) }

	added := map[string]string{} // name → the line, as run
	for _, l := range lines {
		if !strings.HasPrefix(l.line, "claude mcp add ") {
			continue
		}
		run, want := asRun(l)
		name := serverName(run)
		if name == "" {
			t.Fatalf("%s: no server name in %q", l.where, l.line)
		}
		if prev, dup := added[name]; dup {
			t.Fatalf("%s: %q adds %s, which %q added already: the second add fails", l.where, l.line, name, prev)
		}
		bash(t, work, run, env...)
		added[name] = run
		if out := get(name); !strings.Contains(out, want) {
			t.Errorf("%s: after %q, claude mcp get %s does not say %q:\n%s", l.where, run, name, want, out)
		}
	}
	for _, l := range lines {
		if !strings.HasPrefix(l.line, "claude mcp get ") {
			continue
		}
		run, want := asRun(l)
		name := serverName(run)
		if _, ok := added[name]; !ok || l.signIn() != (name == "tickets-signin") {
			t.Errorf("%s: %q names %s, which no line of its section adds", l.where, l.line, name)
			continue
		}
		if out := bash(t, work, run, env...); !strings.Contains(out, want) {
			t.Errorf("%s: %q does not say %q:\n%s", l.where, run, want, out)
		}
	}

	// The README's example of claude mcp get's output, line by line.
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, example, ok := strings.Cut(string(readme), "```\ntickets-http:\n")
	if !ok {
		t.Fatal("README: no example of claude mcp get tickets-http's output")
	}
	example, _, _ = strings.Cut(example, "```")
	out := get("tickets-http")
	for l := range strings.SplitSeq(strings.TrimSpace(atDocAddr(example)), "\n") {
		if !strings.Contains(out, strings.TrimSpace(l)) {
			t.Errorf("README's example of claude mcp get says %q; Claude Code prints:\n%s", strings.TrimSpace(l), out)
		}
	}

	// The token line with another token: mcp-front refuses it, so a
	// connection above means the header reached it.
	for _, l := range lines {
		if strings.Contains(l.line, "TOKEN") && !l.signIn() {
			wrong := substitute(l.line, "tickets-wrong-token", auth.url, "not-the-token")
			bash(t, work, wrong, env...)
			if out := get("tickets-wrong-token"); strings.Contains(out, connected) {
				t.Errorf("%s: with another token, %q still connects: the token is not what authenticates it:\n%s", l.where, wrong, out)
			}
		}
	}
}

// runClusterEnv, set by make test-docs, runs make run-cluster's
// walkthrough: three NATS nodes and two hosts, too heavy for make test.
const runClusterEnv = "TICKETRELAY_RUN_CLUSTER"

// make run-cluster's script, and the steps it prints, run as printed: host
// A's ticket is delivered once to the receiver both hosts share after host
// A is lost, status (with the run's -host-dead-after) shows A adopted;
// Ctrl-C, after a NATS node was killed too, ends the script with status 0;
// and a second run starts empty.
func TestRunClusterWalkthrough(t *testing.T) {
	if os.Getenv(runClusterEnv) == "" {
		t.Skip(runClusterEnv + " is not set: make test-docs runs this test")
	}
	root, err := e2eproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, pkgs := range [][]string{
		{"./cmd/mcp-front", "./cmd/dispatcher", "./testkit/cmd/natscluster", "./examples/webhook-receiver"},
		{"github.com/nats-io/nats-server/v2"},
	} {
		build := exec.Command("go", append([]string{"build", "-o", bin + string(os.PathSeparator)}, pkgs...)...)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", pkgs, err, out)
		}
	}
	data := filepath.Join(t.TempDir(), "data-cluster")
	var env []string
	for _, v := range []string{"CLUSTER_LISTEN_A", "CLUSTER_LISTEN_B", "CLUSTER_METRICS_A", "CLUSTER_METRICS_B", "CLUSTER_RECEIVER"} {
		addr, err := e2eproc.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, v+"="+addr)
	}
	env = append(env, "CLUSTER_DATA="+data, "CLUSTER_DEAD_AFTER=5s", "BIN="+bin)
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range []string{"host-b/dispatcher.log", "host-b/mcp-front.log", "receiver.log", "nats.log"} {
				e2eproc.DumpLog(t, l, filepath.Join(data, l))
			}
		}
	})

	out, stop := startRunCluster(t, root, env)
	_, walk, ok := strings.Cut(out, "Kill a host and watch")
	if !ok {
		t.Fatalf("run-cluster printed no steps:\n%s", out)
	}
	var steps []string // the commands of the numbered steps, continuation lines joined
	for l := range strings.SplitSeq(walk, "\n") {
		switch {
		case strings.HasPrefix(l, "      ") && len(steps) > 0 && strings.HasSuffix(steps[len(steps)-1], "\\"):
			steps[len(steps)-1] = strings.TrimSuffix(steps[len(steps)-1], "\\") + strings.TrimSpace(l)
		case strings.HasPrefix(l, "      "):
			steps = append(steps, strings.TrimSpace(l))
		}
	}
	if len(steps) != 6 {
		t.Fatalf("want 6 commands in the printed steps (kill, create, find, lose A, grep, status); got %d:\n%s", len(steps), strings.Join(steps, "\n"))
	}
	dir := filepath.Dir(data)
	bash(t, dir, steps[0])
	if created := bash(t, dir, steps[1]); !strings.Contains(created, `"status":"queued"`) {
		t.Fatalf("create_ticket on host A: %s", created)
	}
	if found := bash(t, dir, steps[2]); !strings.Contains(found, `"status":"queued"`) {
		t.Fatalf("find_request on host B: %s", found)
	}
	bash(t, dir, steps[3])
	testwait.For(t, 60*time.Second, "host B delivers host A's ticket", func() bool {
		return strings.Contains(bash(t, dir, steps[2]), `"status":"delivered"`)
	})
	if n := strings.TrimSpace(bash(t, dir, steps[4])); n != "1" {
		t.Fatalf("%s: %s; want the ticket once at the receiver", steps[4], n)
	}
	if !strings.Contains(steps[5], "-host-dead-after 5s") {
		t.Fatalf("the printed status line judges hosts with another -host-dead-after than the run's: %s", steps[5])
	}
	testwait.For(t, 60*time.Second, "status shows host A adopted", func() bool {
		return strings.Contains(bash(t, dir, steps[5]+" || true"), "adopted by")
	})

	// A NATS node killed, then Ctrl-C: a clean end.
	nodes, err := os.ReadFile(filepath.Join(data, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`node=n2 pid=(\d+)`).FindStringSubmatch(string(nodes))
	if m == nil {
		t.Fatalf("no pid of node n2 in nats.log:\n%s", nodes)
	}
	bash(t, dir, "kill -9 "+m[1])
	if end := stop(); !strings.Contains(end, "run-cluster: stopped") {
		t.Fatalf("after Ctrl-C:\n%s", end)
	}

	// A second run starts empty: host B knows nothing of demo-1.
	_, stop = startRunCluster(t, root, env)
	if found := bash(t, dir, steps[2]); !strings.Contains(found, `"status":"unknown"`) {
		t.Fatalf("find_request on a second run's host B: %s; want unknown", found)
	}
	if b, err := os.ReadFile(filepath.Join(data, "receiver", "tickets.jsonl")); err != nil || len(b) != 0 {
		t.Fatalf("a second run's receiver holds tickets (%v):\n%s", err, b)
	}
	stop()
}

// startRunCluster starts testkit/scripts/run-cluster.sh in a process group of its
// own, as a terminal runs make, and waits for its summary; stop sends the
// group SIGINT (a terminal's Ctrl-C), requires status 0 and returns the
// script's output.
func startRunCluster(t *testing.T, root string, env []string) (summary string, stop func() string) {
	t.Helper()
	var out testio.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "testkit", "scripts", "run-cluster.sh"))
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	stop = func() string {
		if stopped {
			return out.String()
		}
		stopped = true
		syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run-cluster after Ctrl-C: %v; want status 0:\n%s", err, out.String())
			}
		case <-time.After(60 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Errorf("run-cluster still running 60 s after Ctrl-C:\n%s", out.String())
		}
		return out.String()
	}
	t.Cleanup(func() { stop() })
	ready := "the next run starts over"
	testwait.For(t, 3*time.Minute, "run-cluster's summary", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("run-cluster exited (%v):\n%s", err, out.String())
		default:
		}
		return strings.Contains(out.String(), ready)
	})
	return out.String(), stop
}
