// Package config reads the one configuration file both processes share:
// the targets tickets are delivered to and the MCP tools bound to them.
// Secrets are never written in the file; it names environment variables
// (token_env: ZENDESK_TOKEN), read through an injected lookup when the file
// is loaded. An error lists every problem of the file, one line each, with
// the line of the file it is at.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"

	"ticketrelay/delivery/targets"
	"ticketrelay/ticket"
)

// DefaultTool is the create tool of the zero-config setup.
const DefaultTool = "create_ticket"

// File is the configuration file.
type File struct {
	// KeyNamespace prefixes the dedupe keys sent downstream, so that two
	// deployments sharing one downstream account never collide.
	KeyNamespace string   `yaml:"key_namespace"`
	Targets      []Target `yaml:"targets"`
	Tools        []Tool   `yaml:"tools"`
	// Grants say which caller may call which tool (see Grant); none (the
	// key left out): every caller may call every tool.
	Grants []Grant `yaml:"grants,omitempty"`
	// SearchScope is which tickets search_tickets finds:
	// SearchScopeTargets (the default) or SearchScopeOwn.
	SearchScope string `yaml:"search_scope,omitempty"`
}

// Target is one downstream, as written in the file.
type Target struct {
	Name string `yaml:"name"`
	Kind string `yaml:"kind"`
	// Endpoint is the API's base URL (webhook: the URL to post to); github
	// and pagerduty default to their public hosts.
	Endpoint string `yaml:"endpoint"`
	// Timeout bounds one HTTP call (default 20s).
	Timeout time.Duration `yaml:"timeout"`
	// RateLimit paces the calls to the API (default: none).
	RateLimit *RateLimit `yaml:"rate_limit"`
	// Options are the kind's own settings (see kindOptions); an option
	// ending in _env names an environment variable that holds a secret.
	Options map[string]string `yaml:"options"`
	// Caller is what the target's tickets say of who asked: none (the
	// default), footer (a line at the end of the body) or field (the
	// API's own field; zendesk only). See downstream.CallerMode.
	Caller string `yaml:"caller"`
	// GroupWindow is how long after its first report a fingerprint's
	// ticket takes the repeats of it (group.go); 0: the default.
	GroupWindow time.Duration `yaml:"group_window"`

	def targets.Def // resolved by Parse
}

// Tool is one MCP create tool.
type Tool struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Target      string `yaml:"target"`
	// Fields are the target's fields the tool sets on every ticket, each
	// from an argument of the tool or a fixed value (fields.go).
	Fields []ToolField `yaml:"fields,omitempty"`

	maps []ticket.FieldMap // Fields, checked by Parse
}

// Default is the configuration used without a file: one local target and
// create_ticket bound to it.
func Default() *File {
	f := &File{
		Targets: []Target{{Name: targets.DefaultName, Kind: "local"}},
		Tools:   []Tool{{Name: DefaultTool, Target: targets.DefaultName}},
	}
	f.Targets[0].def = targets.Def{Name: targets.DefaultName, Kind: "local"}
	return f
}

// Load reads and validates the file at path; an empty path gives Default.
// lookup reads environment variables (os.LookupEnv in production); nil
// skips secrets (see Parse).
func Load(path string, lookup func(string) (string, bool)) (*File, error) {
	if path == "" {
		return Default(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, err := Parse(b, lookup)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes and validates a configuration. Unknown keys are errors.
// A nil lookup reads no secrets: the result has the file's shape (targets,
// kinds, tools) for a process that delivers nothing (mcp-front), which then
// needs none of the downstream credentials.
//
// Every problem of the file is reported at once, in an *Error, each with
// its line: fixing a file takes one round, not one per mistake. A YAML
// syntax error stops the reading, and is the one problem reported.
func Parse(b []byte, lookup func(string) (string, bool)) (*File, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, &Error{Problems: []Problem{syntaxProblem(b, err)}}
	}
	// One document: a second one ("---") would be silently ignored.
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		return nil, &Error{Problems: []Problem{{Line: more.Line, Msg: "a second YAML document; the configuration is one document"}}}
	} else if !errors.Is(err, io.EOF) {
		return nil, &Error{Problems: []Problem{syntaxProblem(b, err)}}
	}
	var f File
	// Decoded again, from the text: only a Decoder refuses unknown keys.
	strict := yaml.NewDecoder(bytes.NewReader(b))
	strict.KnownFields(true)
	at := spotsOf(&doc)
	var ps problems
	if err := strict.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		// A TypeError leaves the rest of the file decoded: it is checked
		// too, so that all its problems come in one report.
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, &Error{Problems: []Problem{syntaxProblem(b, err)}}
		}
		for _, e := range te.Errors {
			ps = append(ps, at.typeProblem(e))
		}
	}
	if len(f.Targets) != len(at.targets) {
		at.targets = nil // an item that is not a mapping was dropped: positions no longer match
	}
	if len(f.Tools) != len(at.tools) {
		at.tools = nil
	}
	if len(f.Grants) != len(at.grants) {
		at.grants = nil
	}
	if len(f.Targets) == 0 {
		f.Targets = Default().Targets
	}
	if len(f.Tools) == 0 && len(f.Targets) == 1 {
		f.Tools = []Tool{{Name: DefaultTool, Target: f.Targets[0].Name}}
	}
	f.validate(lookup, at, &ps)
	if len(ps) > 0 {
		return nil, ps.err()
	}
	return &f, nil
}

var (
	toolNameRE  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	namespaceRE = regexp.MustCompile(`^[!-~]*$`)
)

// validate adds every problem of f to ps.
func (f *File) validate(lookup func(string) (string, bool), at spots, ps *problems) {
	if len(f.KeyNamespace) > 64 || !namespaceRE.MatchString(f.KeyNamespace) {
		ps.add(at.top["key_namespace"], "key_namespace %q: at most 64 visible ASCII characters", f.KeyNamespace)
	}
	seen := map[string]bool{}
	for i := range f.Targets {
		t := &f.Targets[i]
		ts := at.target(i)
		before := len(*ps)
		def := t.resolve(lookup, ts, ps)
		shapeProblems(def.ValidateShape(), ts, ps)
		// The adapter's own checks need the secrets, and would repeat what
		// is already reported (a missing secret is a missing credential).
		if lookup != nil && len(*ps) == before {
			if err := def.Validate(); err != nil {
				ps.add(ts.line, "%s", err)
			}
		}
		if seen[t.Name] {
			ps.add(ts.key("name"), "target %q is defined twice", t.Name)
		}
		seen[t.Name] = true
		t.def = def
	}
	tools := map[string]bool{FindRequestTool: true, SearchTicketsTool: true}
	defs := map[string]targets.Def{}
	for _, t := range f.Targets {
		defs[t.Name] = t.def
	}
	for i := range f.Tools {
		t := &f.Tools[i]
		ts := at.tool(i)
		if !toolNameRE.MatchString(t.Name) {
			ps.add(ts.key("name"), "tool name %q: use 1-64 letters, digits, '-' or '_'", t.Name)
		} else if tools[t.Name] {
			ps.add(ts.key("name"), "tool %q is defined twice (find_request and search_tickets are built in)", t.Name)
		}
		tools[t.Name] = true
		if !seen[t.Target] {
			ps.add(ts.key("target"), "tool %q is bound to target %q, which is not defined", t.Name, t.Target)
		} else {
			t.checkFields(defs[t.Target], ps)
		}
	}
	if len(f.Tools) == 0 {
		ps.add(at.top["tools"], "no tools: define at least one tool bound to a target")
	}
	f.validateGrants(tools, at, ps)
	f.validateSearch(at, ps)
	f.validateGroupWindows(at, ps)
}

// Def is the target's resolved definition (secrets read from the
// environment when the file was parsed).
func (t Target) Def() targets.Def {
	if t.def.Kind == "" {
		return targets.Def{Name: t.Name, Kind: t.Kind, Endpoint: t.Endpoint, Timeout: t.Timeout}
	}
	return t.def
}

// Defs returns the target definitions.
func (f *File) Defs() []targets.Def {
	defs := make([]targets.Def, len(f.Targets))
	for i, t := range f.Targets {
		defs[i] = t.Def()
	}
	return defs
}
