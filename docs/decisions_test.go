package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// indexRow is one row of decisions/README.md: | [NNNN](file) | title | status |
var indexRow = regexp.MustCompile(`^\| \[(\d{4})\]\(([^)]+)\) \| [^|]+ \| ([^|]+) \|$`)

// recordStatus is what a row's status may say; a number it names must be a record.
var recordStatus = regexp.MustCompile(`^(accepted|accepted, amended by (\d{4}(?:, \d{4})*)|superseded by (\d{4}))$`)

// TestDecisionIndexListsEveryRecord keeps decisions/README.md complete: a
// record added without a row, a row whose file is gone, or a status naming
// a record that does not exist fails here, where the record is written.
func TestDecisionIndexListsEveryRecord(t *testing.T) {
	files, err := filepath.Glob("decisions/[0-9][0-9][0-9][0-9]-*.md")
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]string{} // number → file name
	for _, f := range files {
		base := filepath.Base(f)
		if prev, dup := onDisk[base[:4]]; dup {
			t.Errorf("two records numbered %s: %s and %s", base[:4], prev, base)
		}
		onDisk[base[:4]] = base
	}
	if len(onDisk) < 50 {
		t.Fatalf("found only %d decision records", len(onDisk))
	}

	b, err := os.ReadFile("decisions/README.md")
	if err != nil {
		t.Fatal(err)
	}
	indexed := map[string]bool{}
	var named []string // record numbers that statuses refer to
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| [") {
			continue
		}
		m := indexRow.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("index row not of the form | [NNNN](file) | decision | status |: %s", line)
			continue
		}
		num, file, status := m[1], m[2], strings.TrimSpace(m[3])
		if indexed[num] {
			t.Errorf("record %s is indexed twice", num)
		}
		indexed[num] = true
		if onDisk[num] != file {
			t.Errorf("index row %s points at %q; the record on disk is %q", num, file, onDisk[num])
		}
		s := recordStatus.FindStringSubmatch(status)
		if s == nil {
			t.Errorf("record %s: status %q is not accepted, accepted, amended by N, or superseded by N", num, status)
			continue
		}
		for _, n := range regexp.MustCompile(`\d{4}`).FindAllString(s[2]+" "+s[3], -1) {
			if n == num {
				t.Errorf("record %s names itself in its status", num)
			}
			named = append(named, n)
		}
	}
	for num, file := range onDisk {
		if !indexed[num] {
			t.Errorf("decisions/README.md does not index %s", file)
		}
	}
	for _, n := range named {
		if onDisk[n] == "" {
			t.Errorf("a status names record %s, which does not exist", n)
		}
	}
}
