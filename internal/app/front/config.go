package front

import (
	"strings"

	"ticketrelay/config"
	"ticketrelay/delivery/targets"
	"ticketrelay/front/mcptools"
)

// bindings turns the configured tools into MCP tool bindings, each with the
// capabilities of its target.
func bindings(f *config.File) ([]mcptools.Binding, error) {
	caps, err := targets.CapabilitiesByName(f.Defs())
	if err != nil {
		return nil, err
	}
	kinds := map[string]string{}
	for _, d := range f.Defs() {
		kinds[d.Name] = d.Kind
	}
	out := make([]mcptools.Binding, 0, len(f.Tools))
	for _, t := range f.Tools {
		out = append(out, mcptools.Binding{Tool: t.Name, Description: t.Description, Target: t.Target, Kind: kinds[t.Target],
			Capabilities: caps[t.Target], Fields: t.FieldMaps()})
	}
	return out, nil
}

// beyond is what each target bound to a tool takes beyond creates, from
// its definition without secrets (targets.BeyondOf).
func beyond(f *config.File) map[string]mcptools.Beyond {
	bound := map[string]bool{}
	for _, t := range f.Tools {
		bound[t.Target] = true
	}
	out := map[string]mcptools.Beyond{}
	for _, d := range f.Defs() {
		if b := targets.BeyondOf(d); bound[d.Name] {
			out[d.Name] = mcptools.Beyond{Comments: b.Comments, CommentsIdempotent: b.Idempotent(), UpdateFields: b.UpdateFields}
		}
	}
	return out
}

// access is the configuration's grants as the tools hold callers to them;
// nil without grants (every caller may call every tool).
func access(f *config.File) *mcptools.Access {
	grants := make([]mcptools.Grant, len(f.Grants))
	for i, g := range f.Grants {
		grants[i] = mcptools.Grant{Subject: g.Subject, Group: g.Group, Scope: g.Scope, Anonymous: g.Anonymous, Tools: g.Allowed()}
	}
	return mcptools.NewAccess(grants)
}

// toolNames lists the configured tools with their targets, for the
// start-up log.
func toolNames(f *config.File) string {
	names := make([]string, len(f.Tools))
	for i, t := range f.Tools {
		names[i] = t.Name + "->" + t.Target
	}
	return strings.Join(names, ", ")
}

// grantNames lists the grants, each whom it names and the tools it gives,
// for the start-up log: "none" without grants (every caller may call
// every tool).
func grantNames(f *config.File) string {
	if f.Grants == nil {
		return "none"
	}
	names := make([]string, len(f.Grants))
	for i, g := range f.Grants {
		names[i] = g.Who() + "->" + strings.Join(g.Allowed(), "+")
	}
	return strings.Join(names, ", ")
}
