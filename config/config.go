// Package config reads the one configuration file both processes share:
// the targets tickets are delivered to and the MCP tools bound to them.
// Secrets are never written in the file; it names environment variables
// (token_env: ZENDESK_TOKEN), read through an injected lookup when the file
// is loaded. Every error is one line that names the problem.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"ticketrelay/targets"
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

	def targets.Def // resolved by Parse
}

// Tool is one MCP create tool.
type Tool struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Target      string `yaml:"target"`
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
func Parse(b []byte, lookup func(string) (string, bool)) (*File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(err)
	}
	// One document: a second one ("---") would be silently ignored.
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		return nil, fmt.Errorf("line %d: a second YAML document; the configuration is one document", more.Line)
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlError(err)
	}
	if len(f.Targets) == 0 {
		f.Targets = Default().Targets
	}
	if len(f.Tools) == 0 && len(f.Targets) == 1 {
		f.Tools = []Tool{{Name: DefaultTool, Target: f.Targets[0].Name}}
	}
	if err := f.validate(lookup); err != nil {
		return nil, err
	}
	return &f, nil
}

var fieldRE = regexp.MustCompile(`line (\d+): field (\S+) not found in type config\.(\w+)`)

// yamlError turns the decoder's (possibly multi-line) error into one line.
func yamlError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%s", lineBreaks.Replace(err.Error()))
	}
	where := map[string]string{"File": "at the top level", "Target": "in a target", "Tool": "in a tool"}
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		if m := fieldRE.FindStringSubmatch(e); m != nil {
			msgs = append(msgs, fmt.Sprintf("line %s: unknown key %q %s", m[1], m[2], where[m[3]]))
			continue
		}
		// A message may quote a scalar of the file, line breaks included.
		msgs = append(msgs, lineBreaks.Replace(strings.TrimSpace(e)))
	}
	return errors.New(strings.Join(msgs, "; "))
}

var lineBreaks = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ")

var (
	toolNameRE  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	namespaceRE = regexp.MustCompile(`^[!-~]*$`)
)

func (f *File) validate(lookup func(string) (string, bool)) error {
	if len(f.KeyNamespace) > 64 || !namespaceRE.MatchString(f.KeyNamespace) {
		return fmt.Errorf("key_namespace %q: at most 64 visible ASCII characters", f.KeyNamespace)
	}
	seen := map[string]bool{}
	for i := range f.Targets {
		t := &f.Targets[i]
		def, err := t.resolve(lookup)
		if err != nil {
			return err
		}
		check := def.Validate
		if lookup == nil {
			check = def.ValidateShape // no secrets read: the adapters cannot be built
		}
		if err := check(); err != nil {
			return err
		}
		if seen[t.Name] {
			return fmt.Errorf("target %q is defined twice", t.Name)
		}
		seen[t.Name] = true
		t.def = def
	}
	tools := map[string]bool{"find_request": true}
	for _, t := range f.Tools {
		if !toolNameRE.MatchString(t.Name) {
			return fmt.Errorf("tool name %q: use 1-64 letters, digits, '-' or '_'", t.Name)
		}
		if tools[t.Name] {
			return fmt.Errorf("tool %q is defined twice (find_request is built in)", t.Name)
		}
		tools[t.Name] = true
		if !seen[t.Target] {
			return fmt.Errorf("tool %q is bound to target %q, which is not defined", t.Name, t.Target)
		}
	}
	if len(f.Tools) == 0 {
		return errors.New("no tools: define at least one tool bound to a target")
	}
	return nil
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
