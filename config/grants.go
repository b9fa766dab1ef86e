package config

import (
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"
)

// Words of a grant's tools: besides tool names.
const (
	GrantAll      = "all"       // every tool
	GrantReadOnly = "read-only" // find_request and search_tickets only
)

// FindRequestTool is the built-in status tool every grant includes: it
// reads only the caller's own requests, and the create tools tell an agent
// to call it after an error.
const FindRequestTool = "find_request"

// Grant gives a caller tools. Who is one of Subject, Group, Scope or
// Anonymous; what is Tools (names, "all", "read-only") and Targets (every
// tool bound to them), at least one of the two.
type Grant struct {
	// Subject is a static token's subject, or a signed-in user: the
	// token's sub, or its full subject (issuer/sub, as the ledger keeps it).
	Subject string `yaml:"subject,omitempty"`
	// Group is a value of the -oauth-groups-claim of a signed-in user.
	Group string `yaml:"group,omitempty"`
	// Scope is an OAuth scope of the caller's access token.
	Scope string `yaml:"scope,omitempty"`
	// Anonymous is the caller without a token: stdio, or HTTP without
	// authentication.
	Anonymous bool     `yaml:"anonymous,omitempty"`
	Tools     ToolList `yaml:"tools,omitempty"`
	Targets   []string `yaml:"targets,omitempty"`

	allowed []string // resolved by Parse: the tool names granted, find_request and search_tickets included
}

// ToolList is a grant's tools: one word or a list.
type ToolList []string

// UnmarshalYAML reads "tools: all" as well as "tools: [a, b]".
func (l *ToolList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = ToolList{n.Value}
		return nil
	}
	var s []string
	if err := n.Decode(&s); err != nil {
		return err
	}
	*l = s
	return nil
}

// Allowed is the tool names g grants, find_request and search_tickets included.
func (g Grant) Allowed() []string { return g.allowed }

// Who says whom g names, as the file writes it ("subject alice").
func (g Grant) Who() string {
	switch {
	case g.Subject != "":
		return "subject " + g.Subject
	case g.Group != "":
		return "group " + g.Group
	case g.Scope != "":
		return "scope " + g.Scope
	case g.Anonymous:
		return "anonymous"
	}
	return "nobody"
}

// validateGrants resolves each grant's tools and adds the problems of the
// grants to ps: a grant names one who, and only tools and targets the file
// defines. tools is every tool name, find_request included.
func (f *File) validateGrants(tools map[string]bool, at spots, ps *problems) {
	if f.Grants == nil {
		return
	}
	if len(f.Grants) == 0 {
		ps.add(at.top["grants"], "grants: an empty list grants nothing to anyone; remove the key to let every caller call every tool")
		return
	}
	for _, w := range []string{GrantAll, GrantReadOnly} {
		if tools[w] {
			ps.add(at.top["grants"], "tool %q has the name of a grants word; rename the tool", w)
		}
	}
	byTarget := map[string][]string{}
	for _, t := range f.Tools {
		byTarget[t.Target] = append(byTarget[t.Target], t.Name)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range tools {
			if !yield(n) {
				return
			}
		}
	})
	for i := range f.Grants {
		g := &f.Grants[i]
		gs := at.grant(i)
		// A grant the decoder found a mistake in is reported once, for
		// that mistake, not again for what the mistake left out.
		decoded := !ps.within(gs.line, gs.last)
		who := 0
		for _, set := range []bool{g.Subject != "", g.Group != "", g.Scope != "", g.Anonymous} {
			if set {
				who++
			}
		}
		if who != 1 && decoded {
			ps.add(gs.line, "grant %d: name exactly one of subject, group, scope or anonymous: true (it names %d)", i+1, who)
		}
		if len(g.Tools) == 0 && len(g.Targets) == 0 && decoded {
			ps.add(gs.line, "grant %d (%s): say what it grants: tools: %s, %s or a list of tool names, or targets: a list of targets", i+1, g.Who(), GrantAll, GrantReadOnly)
		}
		allowed := []string{FindRequestTool, SearchTicketsTool}
		add := func(names ...string) {
			for _, n := range names {
				if !slices.Contains(allowed, n) {
					allowed = append(allowed, n)
				}
			}
		}
		for _, t := range g.Tools {
			switch {
			case t == GrantAll:
				add(names...)
			case t == GrantReadOnly:
			case tools[t]:
				add(t)
			default:
				ps.add(gs.key("tools"), "grant %d (%s): tool %q is not defined (tools: %s, or %s, %s)", i+1, g.Who(), t,
					joinQuoted(names), GrantAll, GrantReadOnly)
			}
		}
		for _, t := range g.Targets {
			bound, ok := byTarget[t]
			if !ok {
				ps.add(gs.key("targets"), "grant %d (%s): target %q has no tool bound to it", i+1, g.Who(), t)
			}
			add(bound...)
		}
		slices.Sort(allowed)
		g.allowed = allowed
	}
}

func joinQuoted(names []string) string {
	out := ""
	for i, n := range names {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%q", n)
	}
	return out
}
