package app

import (
	"ticketrelay/config"
	"ticketrelay/mcpserver"
	"ticketrelay/targets"
)

// bindings turns the configured tools into MCP tool bindings, each with the
// capabilities of its target.
func bindings(f *config.File) ([]mcpserver.Binding, error) {
	defs := map[string]targets.Def{}
	for _, d := range f.Defs() {
		defs[d.Name] = d
	}
	out := make([]mcpserver.Binding, 0, len(f.Tools))
	for _, t := range f.Tools {
		caps, err := targets.CapabilitiesOf(defs[t.Target])
		if err != nil {
			return nil, err
		}
		out = append(out, mcpserver.Binding{Tool: t.Name, Description: t.Description, Target: t.Target, Capabilities: caps})
	}
	return out, nil
}
