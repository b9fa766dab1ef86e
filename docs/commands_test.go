package docs

// The command lines the docs give a user are run here, as written, against
// real processes: the README's curl session against mcp-front and a
// dispatcher started as `make run` starts them, and every `claude mcp add`
// and `claude mcp get` line of the README and of docs/*.md against the real
// Claude Code CLI (make test-docs installs the pinned version and sets
// TICKETRELAY_CLAUDE_CODE) with a throwaway HOME. Only the port, chosen at
// run time, and the placeholders NAME, URL and TOKEN are substituted.

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/internal/e2eproc"
	"ticketrelay/internal/testwait"
)

// connected is what claude mcp get prints of a server it connected to.
const connected = "Status: ✔ Connected"

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
	front, disp := binaries(t)
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	e2eproc.Start(t, dir, "dispatcher", disp, []string{"-data", data, "-nats-listen", "127.0.0.1:0", "-metrics-listen", ""}, nil, "nats")
	f := e2eproc.Start(t, dir, "mcp-front", front, append([]string{"-create-db", "-db", filepath.Join(data, "tickets.db"),
		"-listen", "127.0.0.1:0", "-metrics-listen", ""}, frontArgs...), nil, "mcp")
	return system{dir: dir, url: "http://" + f.Addr("mcp") + "/mcp"}
}

// shellBlocks returns the lines of the ```sh blocks of a Markdown file
// that follow the heading, up to the next heading.
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

// claudeLine is a `claude mcp` command line given in a doc.
type claudeLine struct {
	where, line string
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
		inBlock, n := false, 0
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
					lines = append(lines, claudeLine{page + ":" + strconv.Itoa(n), c})
				}
				continue
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
					lines = append(lines, claudeLine{page + ":" + strconv.Itoa(n), c})
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
// token must not connect.
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

	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=" + filepath.Dir(claude) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "XDG_CONFIG_HOME=" + filepath.Join(home, ".config")}
	atDocAddr := func(text string) string { return strings.ReplaceAll(text, "http://"+docAddr+"/mcp", s.url) }
	substitute := func(line, url, tok string) string {
		line = atDocAddr(line)
		line = regexp.MustCompile(`\bNAME\b`).ReplaceAllString(line, "tickets-auth")
		line = regexp.MustCompile(`\bURL\b`).ReplaceAllString(line, url)
		return regexp.MustCompile(`\bTOKEN\b`).ReplaceAllString(line, tok)
	}
	get := func(name string) string { return bash(t, work, "claude mcp get "+name, env...) }

	added := map[string]string{} // name → the line, as run
	for _, l := range lines {
		if !strings.HasPrefix(l.line, "claude mcp add ") {
			continue
		}
		run := substitute(l.line, auth.url, token)
		name := serverName(run)
		if name == "" {
			t.Fatalf("%s: no server name in %q", l.where, l.line)
		}
		if prev, dup := added[name]; dup {
			t.Fatalf("%s: %q adds %s, which %q added already: the second add fails", l.where, l.line, name, prev)
		}
		bash(t, work, run, env...)
		added[name] = run
		if out := get(name); !strings.Contains(out, connected) {
			t.Errorf("%s: after %q, claude mcp get %s does not connect:\n%s", l.where, run, name, out)
		}
	}
	for _, l := range lines {
		if !strings.HasPrefix(l.line, "claude mcp get ") {
			continue
		}
		name := serverName(l.line)
		if _, ok := added[name]; !ok {
			t.Errorf("%s: %q names %s, which no line of the docs adds", l.where, l.line, name)
			continue
		}
		if out := bash(t, work, substitute(l.line, auth.url, token), env...); !strings.Contains(out, connected) {
			t.Errorf("%s: %q does not connect:\n%s", l.where, l.line, out)
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
		if strings.Contains(l.line, "TOKEN") {
			wrong := strings.Replace(substitute(l.line, auth.url, "not-the-token"), "tickets-auth", "tickets-wrong-token", 1)
			bash(t, work, wrong, env...)
			if out := get("tickets-wrong-token"); strings.Contains(out, connected) {
				t.Errorf("%s: with another token, %q still connects: the token is not what authenticates it:\n%s", l.where, wrong, out)
			}
		}
	}
}
