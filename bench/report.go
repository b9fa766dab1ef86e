package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// row is one line of the results table.
type row struct {
	id, scenario, settings, figure, baseline, ratio, target, result string
}

var header = row{"#", "scenario", "settings", "figure", "baseline (same run)", "ratio", "target", "result"}

// report is the outcome of one `make bench`.
type report struct {
	started time.Time
	elapsed time.Duration
	quick   bool
	version string
	machine machine
	rows    []row
	details []string // one line per measurement, under the table
	notes   []string // how to read it
}

func (r *report) add(x row) { r.rows = append(r.rows, x) }
func (r *report) detail(format string, a ...any) {
	r.details = append(r.details, fmt.Sprintf(format, a...))
}

func (r *report) mode() string {
	if r.quick {
		return "quick smoke run (BENCH_QUICK=1): short windows, small backlogs; figures are indicative only"
	}
	return "full run"
}

// text writes the table for a terminal.
func (r *report) text(w io.Writer) {
	fmt.Fprintf(w, "\nticketrelay benchmark, %s, %s (%s, took %s)\n", r.started.Format("2006-01-02 15:04 MST"), r.version, r.mode(), r.elapsed.Round(time.Second))
	fmt.Fprintf(w, "machine: %s\n\n", r.machine)
	all := append([]row{header}, r.rows...)
	width := make([]int, 8)
	for _, x := range all {
		for i, c := range x.cells() {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for n, x := range all {
		var b strings.Builder
		for i, c := range x.cells() {
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(c)
			if i < 7 {
				b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		if n == 0 {
			total := 0
			for _, wd := range width {
				total += wd + 2
			}
			fmt.Fprintln(w, strings.Repeat("-", total-2))
		}
	}
	fmt.Fprintln(w)
	for _, d := range r.details {
		fmt.Fprintln(w, "  "+d)
	}
	fmt.Fprintln(w)
}

// markdown writes the same table as a Markdown document.
func (r *report) markdown(w io.Writer) {
	fmt.Fprintf(w, "# ticketrelay benchmark\n\n")
	fmt.Fprintf(w, "- date: %s\n- build: %s\n- mode: %s (took %s)\n- machine: %s\n\n",
		r.started.Format("2006-01-02 15:04 MST"), r.version, r.mode(), r.elapsed.Round(time.Second), r.machine)
	fmt.Fprintln(w, header.markdown())
	fmt.Fprintln(w, "|---|---|---|--:|--:|--:|---|---|")
	for _, x := range r.rows {
		fmt.Fprintln(w, x.markdown())
	}
	fmt.Fprintf(w, "\n## Measurements\n\n")
	for _, d := range r.details {
		fmt.Fprintf(w, "- %s\n", d)
	}
	if len(r.notes) > 0 {
		fmt.Fprintf(w, "\n## How to read it\n\n")
		for _, n := range r.notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}

func (x row) cells() []string {
	return []string{x.id, x.scenario, x.settings, x.figure, x.baseline, x.ratio, x.target, x.result}
}

func (x row) markdown() string {
	c := x.cells()
	for i := range c {
		c[i] = strings.ReplaceAll(c[i], "|", `\|`)
	}
	return "| " + strings.Join(c, " | ") + " |"
}
