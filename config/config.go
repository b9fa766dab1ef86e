// Package config reads the one configuration file both processes share:
// the targets tickets are delivered to and the MCP tools bound to them.
// Secrets are never written in the file; it names environment variables.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"

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

// Target is one downstream.
type Target struct {
	Name string `yaml:"name"`
	Kind string `yaml:"kind"`
	// Path of a local target's file (default DATA/tickets.jsonl).
	Path string `yaml:"path"`
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
	return &File{
		Targets: []Target{{Name: targets.DefaultName, Kind: "local"}},
		Tools:   []Tool{{Name: DefaultTool, Target: targets.DefaultName}},
	}
}

// Load reads and validates the file at path; an empty path gives Default.
func Load(path string) (*File, error) {
	if path == "" {
		return Default(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes and validates a configuration. Unknown keys are errors.
func Parse(b []byte) (*File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(f.Targets) == 0 {
		f.Targets = Default().Targets
	}
	if len(f.Tools) == 0 && len(f.Targets) == 1 {
		f.Tools = []Tool{{Name: DefaultTool, Target: f.Targets[0].Name}}
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func (f *File) validate() error {
	if len(f.KeyNamespace) > 64 || !regexp.MustCompile(`^[!-~]*$`).MatchString(f.KeyNamespace) {
		return fmt.Errorf("key_namespace %q: at most 64 visible ASCII characters", f.KeyNamespace)
	}
	seen := map[string]bool{}
	for _, t := range f.Targets {
		if err := t.Def().Validate(); err != nil {
			return err
		}
		if seen[t.Name] {
			return fmt.Errorf("target %q is defined twice", t.Name)
		}
		seen[t.Name] = true
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

// Def converts t for the targets package.
func (t Target) Def() targets.Def {
	return targets.Def{Name: t.Name, Kind: t.Kind, Path: t.Path}
}

// Defs returns the target definitions.
func (f *File) Defs() []targets.Def {
	defs := make([]targets.Def, len(f.Targets))
	for i, t := range f.Targets {
		defs[i] = t.Def()
	}
	return defs
}
