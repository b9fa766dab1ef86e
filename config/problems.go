package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"ticketrelay/delivery/targets"
)

// Error is every problem found in a configuration, so that a file is
// fixed in one round rather than one run per mistake.
type Error struct {
	Problems []Problem // in the order of the file's lines
}

// Problem is one mistake in the file, on one line of text.
type Problem struct {
	Line int    // the file's line it is at; 0: the file as a whole
	Msg  string // without the line
}

func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("line %d: %s", p.Line, p.Msg)
	}
	return p.Msg
}

// Error is the one problem on one line, or "N problems:" and one indented
// line each.
func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return e.Problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// problems collects what validation finds.
type problems []Problem

// add records a problem. Its text may quote the file (a value, a key): it
// is kept to one line.
func (ps *problems) add(line int, format string, args ...any) {
	*ps = append(*ps, Problem{Line: line, Msg: oneLine(fmt.Sprintf(format, args...))})
}

// within reports whether a problem is on a line from first to last.
func (ps problems) within(first, last int) bool {
	for _, p := range ps {
		if first <= p.Line && p.Line <= last {
			return true
		}
	}
	return false
}

// err sorts the problems by line (the file's own problems first, then the
// file-wide ones) and returns them as an *Error.
func (ps problems) err() *Error {
	out := slices.Clone(ps)
	slices.SortStableFunc(out, func(a, b Problem) int {
		if (a.Line == 0) != (b.Line == 0) {
			return b.Line - a.Line // a line-less problem after the rest
		}
		return a.Line - b.Line
	})
	return &Error{Problems: out}
}

var lineBreaks = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ")

func oneLine(s string) string { return lineBreaks.Replace(strings.TrimSpace(s)) }

// shapeProblems adds the problems of targets.Def.ValidateShape, each at the
// line of the field it is about.
func shapeProblems(err error, at itemSpots, ps *problems) {
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		line := at.line
		var fe *targets.FieldError
		if errors.As(e, &fe) {
			line = at.key(fe.Field)
		}
		ps.add(line, "%s", e)
	}
}

var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// syntaxProblem is a YAML syntax error at the line where it is. The YAML
// library reports the line where the enclosing block starts (a list's first
// item for a key indented one space too few, so often line 1): the line is
// found again as the first one whose addition to the text before it makes
// the parser give the same complaint.
func syntaxProblem(b []byte, err error) Problem {
	msg := oneLine(err.Error())
	m := yamlLineRE.FindStringSubmatch(msg)
	if m == nil {
		return Problem{Msg: "YAML: " + strings.TrimPrefix(msg, "yaml: ")}
	}
	line, _ := strconv.Atoi(m[1])
	what := m[2]
	p := Problem{Line: line, Msg: "YAML: " + what}
	if at := firstFailingLine(b, what, line); at > line {
		p.Line = at
		p.Msg = fmt.Sprintf("YAML: %s (in the block that starts at line %d)", what, line)
	}
	if hint := syntaxHints[what]; hint != "" {
		p.Msg += "; " + hint
	}
	return p
}

// syntaxHints say what a user most often did to get the parser's complaint.
var syntaxHints = map[string]string{
	"did not find expected '-' indicator":              "check this line's indentation: a key of a list item lines up with the item's first key",
	"did not find expected key":                        "check this line's indentation: it lines up with no key above it",
	"mapping values are not allowed in this context":   "check this line's indentation, or quote a value that holds \": \"",
	"found a tab character that violates indentation":  "indent with spaces, not tabs",
	"found character that cannot start any token":      "a tab or a character YAML reserves: indent with spaces, quote the value",
	"found a tab character where an indentation space": "indent with spaces, not tabs",
}

// maxSearchLines bounds the search for a syntax error's line (one parse a
// line): a configuration is a few hundred lines.
const maxSearchLines = 2000

// firstFailingLine is the first line n from `from` on such that lines 1..n
// fail to parse with the complaint what; 0 if none does.
func firstFailingLine(b []byte, what string, from int) int {
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines) > maxSearchLines {
		return 0
	}
	for n := max(from, 1); n <= len(lines); n++ {
		err := parseAll(bytes.Join(lines[:n], nil))
		if err == nil {
			continue
		}
		if m := yamlLineRE.FindStringSubmatch(oneLine(err.Error())); m != nil && m[2] == what {
			return n
		}
	}
	return 0
}

// parseAll parses every document of b.
func parseAll(b []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

var (
	typeLineRE   = regexp.MustCompile(`^line (\d+): (.*)$`)
	unknownKeyRE = regexp.MustCompile(`^field (\S+) not found in type config\.(\w+)$`)
	unmarshalRE  = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into (\\S+)$")
)

// knownKeys are the keys of each part of the file, for a misspelled key's
// suggestion.
var knownKeys = map[string][]string{
	"File":   {"key_namespace", "targets", "tools", "grants"},
	"Target": {"name", "kind", "endpoint", "timeout", "rate_limit", "options"},
	"Tool":   {"name", "description", "target"},
	"Grant":  {"subject", "group", "scope", "anonymous", "tools", "targets"},
}

// typeProblem turns one of the YAML decoder's type errors into a problem
// that names the target or tool it is in and says what to write instead.
func (s spots) typeProblem(e string) Problem {
	m := typeLineRE.FindStringSubmatch(oneLine(e))
	if m == nil {
		return Problem{Msg: oneLine(e)}
	}
	line, _ := strconv.Atoi(m[1])
	msg := m[2]
	where := s.where(line)
	if k := unknownKeyRE.FindStringSubmatch(msg); k != nil {
		return Problem{Line: line, Msg: where + unknownKey(k[1], k[2], s.kindAt(line), where != "")}
	}
	if u := unmarshalRE.FindStringSubmatch(msg); u != nil {
		if hint := typeHint(u[1], u[2], u[3]); hint != "" {
			return Problem{Line: line, Msg: where + hint}
		}
	}
	return Problem{Line: line, Msg: where + msg}
}

// unknownKey is the problem of a key the part `in` (File, Target, Tool)
// does not have: a close known key is suggested, and an option of the
// target's kind written beside options instead of under it is pointed out.
// named: the problem already names the target or tool.
func unknownKey(key, in, kind string, named bool) string {
	what := map[string]string{"File": " at the top level", "Target": " in a target", "Tool": " in a tool", "Grant": " in a grant"}[in]
	if named {
		what = ""
	}
	msg := fmt.Sprintf("unknown key %q%s (known: %s)", key, what, strings.Join(knownKeys[in], ", "))
	if in == "Target" {
		for _, o := range kindOptions[kind] {
			if o.name == key {
				return msg + fmt.Sprintf("; %s is an option of kind %s: indent it under options:", key, kind)
			}
		}
	}
	if near := closest(key, knownKeys[in]); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return msg
}

// typeHint says what a value of the wrong type should look like: tag and
// value are YAML's (int, 10), goType the field's.
func typeHint(tag, value, goType string) string {
	switch goType {
	case "time.Duration":
		if tag == "int" || tag == "float" {
			return fmt.Sprintf("timeout: %s has no unit: durations need a unit: write %ss", value, value)
		}
		return fmt.Sprintf("timeout: %q is not a duration: write a number and a unit, e.g. 10s, 1m30s", value)
	case "[]config.Target":
		return "targets: want a list of targets, each item starting with \"- name:\""
	case "[]config.Tool":
		return "tools: want a list of tools, each item starting with \"- name:\""
	case "[]config.Grant":
		return "grants: want a list of grants, each item starting with \"- subject:\", \"- group:\", \"- scope:\" or \"- anonymous: true\""
	case "config.Target", "config.Tool", "config.Grant", "config.File":
		return fmt.Sprintf("want keys and values (key: value), not a %s", yamlKind(tag))
	case "map[string]string":
		return fmt.Sprintf("options: want keys and values (key: value), not a %s", yamlKind(tag))
	case "string":
		return fmt.Sprintf("want a single value, not a %s", yamlKind(tag))
	case "bool":
		return fmt.Sprintf("anonymous: %q: want true or false", value)
	}
	return ""
}

func yamlKind(tag string) string {
	switch tag {
	case "seq":
		return "list"
	case "map":
		return "mapping"
	case "str":
		return "string"
	}
	return tag
}

// closest is the word of known within two edits of w, if one is.
func closest(w string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(w, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
