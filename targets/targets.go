// Package targets is the list of all downstream adapters: it turns target
// definitions into downstream.Target values and tells the MCP front end each
// target's capabilities without opening it. It sits above downstream/<kind>
// because Go forbids downstream importing its children.
package targets

import (
	"fmt"
	"path/filepath"
	"regexp"
	"time"

	"ticketrelay/downstream"
	"ticketrelay/downstream/local"
)

// DefaultName is the target used when none is configured.
const DefaultName = "local"

// Def is one configured target.
type Def struct {
	Name string
	Kind string
	// Path of the local target's file; default DATA/tickets.jsonl.
	Path string
}

// DefaultDefs is the zero-config set: one local target.
func DefaultDefs() []Def { return []Def{{Name: DefaultName, Kind: "local"}} }

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Validate checks a definition without opening anything.
func (d Def) Validate() error {
	if !nameRE.MatchString(d.Name) {
		return fmt.Errorf("target name %q: use 1-63 lowercase letters, digits, '-' or '_'", d.Name)
	}
	_, err := CapabilitiesOf(d)
	return err
}

// CapabilitiesOf reports what the target of d can guarantee.
func CapabilitiesOf(d Def) (downstream.Capabilities, error) {
	switch d.Kind {
	case "local":
		return local.Capabilities, nil
	}
	return downstream.Capabilities{}, fmt.Errorf("target %q: unknown kind %q", d.Name, d.Kind)
}

// Open builds the targets of defs; dataDir holds local files.
func Open(defs []Def, dataDir string, now func() time.Time) ([]downstream.Target, func() error, error) {
	var out []downstream.Target
	var closers []func() error
	closeAll := func() error {
		var first error
		for _, c := range closers {
			if err := c(); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	for _, d := range defs {
		if err := d.Validate(); err != nil {
			closeAll()
			return nil, nil, err
		}
		switch d.Kind {
		case "local":
			path := d.Path
			if path == "" {
				path = filepath.Join(dataDir, "tickets.jsonl")
			}
			t, err := local.Open(d.Name, path, now)
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			out = append(out, t)
			closers = append(closers, t.Close)
		}
	}
	return out, closeAll, nil
}
