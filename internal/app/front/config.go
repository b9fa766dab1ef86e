package front

import (
	"ticketrelay/config"
	"ticketrelay/mcpserver"
	"ticketrelay/targets"
)

// bindings turns the configured tools into MCP tool bindings, each with the
// capabilities of its target.
func bindings(f *config.File) ([]mcpserver.Binding, error) {
	caps, err := targets.CapabilitiesByName(f.Defs())
	if err != nil {
		return nil, err
	}
	out := make([]mcpserver.Binding, 0, len(f.Tools))
	for _, t := range f.Tools {
		out = append(out, mcpserver.Binding{Tool: t.Name, Description: t.Description, Target: t.Target, Capabilities: caps[t.Target]})
	}
	return out, nil
}
