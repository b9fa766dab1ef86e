// Command testprogress reads `go test -json` on stdin and prints what a
// person waiting for `make test` needs: one line per package as it ends,
// the output of every failing test as soon as it fails, and, during a long
// stretch with nothing to report, which packages are still running. Its
// exit status is 1 if any package failed; make takes go test's own status
// through pipefail, so the suite's pass/fail is go test's.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

func main() {
	p := newPrinter(os.Stdout, time.Now)
	stop := make(chan struct{})
	go p.heartbeat(30*time.Second, stop)
	failed, err := p.read(os.Stdin)
	close(stop)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testprogress:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (see `go doc test2json`), or of the
// build output it carries (`go help buildjson`: ImportPath instead of
// Package).
type event struct {
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

type key struct{ pkg, test string }

type printer struct {
	mu                      sync.Mutex
	w                       io.Writer
	now                     func() time.Time
	began                   time.Time
	last                    time.Time            // when the last line was printed
	running                 map[string]time.Time // package → started
	output                  map[key][]string     // output of tests still running
	passed, failed, noTests int
}

func newPrinter(w io.Writer, now func() time.Time) *printer {
	t := now()
	return &printer{w: w, now: now, began: t, last: t, running: map[string]time.Time{}, output: map[key][]string{}}
}

// read handles events until EOF and reports whether any package failed.
// A line that is not JSON (go test may print one for a setup error) is
// passed through.
func (p *printer) read(r io.Reader) (bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			p.print(sc.Text())
			continue
		}
		p.handle(e)
	}
	if err := sc.Err(); err != nil {
		return true, fmt.Errorf("reading go test's output: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.printLocked(fmt.Sprintf("  %d packages passed, %d failed, %d without tests, in %s",
		p.passed, p.failed, p.noTests, p.now().Sub(p.began).Round(time.Second)))
	return p.failed > 0, nil
}

func (p *printer) handle(e event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case e.Action == "build-output":
		p.printLocked(strings.TrimSuffix(e.Output, "\n"))
	case e.Action == "build-fail":
		// The package's own fail event follows and names it.
	case e.Action == "start":
		p.running[e.Package] = p.now()
	case e.Action == "output":
		k := key{e.Package, e.Test}
		p.output[k] = append(p.output[k], strings.TrimSuffix(e.Output, "\n"))
	case e.Test != "" && e.Action == "fail":
		p.flushLocked(key{e.Package, e.Test})
	case e.Test != "" && (e.Action == "pass" || e.Action == "skip"):
		delete(p.output, key{e.Package, e.Test})
	case e.Action == "pass":
		p.endLocked(e.Package)
		p.passed++
		p.printLocked(fmt.Sprintf("  ok    %s  %.1fs", e.Package, e.Elapsed))
	case e.Action == "skip":
		p.endLocked(e.Package)
		p.noTests++
	case e.Action == "fail":
		// The package's own lines: the final FAIL line, a panic, a
		// timeout's goroutine dump, or why the build failed.
		p.flushLocked(key{e.Package, ""})
		p.endLocked(e.Package)
		p.failed++
		p.printLocked(fmt.Sprintf("  FAIL  %s  %.1fs", e.Package, e.Elapsed))
	}
}

func (p *printer) endLocked(pkg string) {
	delete(p.running, pkg)
	for k := range p.output {
		if k.pkg == pkg {
			delete(p.output, k)
		}
	}
}

func (p *printer) flushLocked(k key) {
	for _, line := range p.output[k] {
		p.printLocked(line)
	}
	delete(p.output, k)
}

func (p *printer) print(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.printLocked(line)
}

func (p *printer) printLocked(line string) {
	fmt.Fprintln(p.w, line)
	p.last = p.now()
}

// heartbeat names the packages still running (or says that test binaries
// are being compiled) after every quiet stretch of at least every.
func (p *printer) heartbeat(every time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.mu.Lock()
			if now := p.now(); now.Sub(p.last) >= every {
				if len(p.running) == 0 {
					p.printLocked("  ...   compiling test binaries")
				} else {
					p.printLocked("  ...   still running: " + p.runningLocked(now))
				}
			}
			p.mu.Unlock()
		}
	}
}

func (p *printer) runningLocked(now time.Time) string {
	pkgs := make([]string, 0, len(p.running))
	for pkg := range p.running {
		pkgs = append(pkgs, pkg)
	}
	slices.SortFunc(pkgs, func(a, b string) int { return p.running[a].Compare(p.running[b]) })
	for i, pkg := range pkgs {
		pkgs[i] = fmt.Sprintf("%s (%s)", pkg, now.Sub(p.running[pkg]).Round(time.Second))
	}
	return strings.Join(pkgs, ", ")
}
