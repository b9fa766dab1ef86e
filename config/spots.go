package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// spots are the lines of the file's parts, read from its YAML nodes, for
// errors: the decoded structs do not keep where a value was written.
type spots struct {
	top     map[string]int // top-level key → its line
	targets []itemSpots
	tools   []itemSpots
	grants  []itemSpots
}

// itemSpots are the lines of one target or tool.
type itemSpots struct {
	line, last int            // the item's first and last line
	name, kind string         // as written, for errors about a line inside the item
	keys       map[string]int // key → its line; options.<key> for a target's options
}

// key is the line of key in the item, or the item's first line.
func (s itemSpots) key(key string) int {
	if l := s.keys[key]; l > 0 {
		return l
	}
	return s.line
}

func (s spots) target(i int) itemSpots {
	if i < len(s.targets) {
		return s.targets[i]
	}
	return itemSpots{}
}

func (s spots) tool(i int) itemSpots {
	if i < len(s.tools) {
		return s.tools[i]
	}
	return itemSpots{}
}

func (s spots) grant(i int) itemSpots {
	if i < len(s.grants) {
		return s.grants[i]
	}
	return itemSpots{}
}

// where names the target or tool that holds line, as a prefix of a
// problem's text ("" outside both).
func (s spots) where(line int) string {
	for _, t := range s.targets {
		if t.line <= line && line <= t.last {
			if t.kind != "" {
				return fmt.Sprintf("target %q (%s): ", t.name, t.kind)
			}
			return fmt.Sprintf("target %q: ", t.name)
		}
	}
	for _, t := range s.tools {
		if t.line <= line && line <= t.last {
			return fmt.Sprintf("tool %q: ", t.name)
		}
	}
	return ""
}

// kindAt is the kind of the target that holds line, as written.
func (s spots) kindAt(line int) string {
	for _, t := range s.targets {
		if t.line <= line && line <= t.last {
			return t.kind
		}
	}
	return ""
}

// spotsOf reads the lines of doc, a parsed document. Parts that do not
// have the expected shape are skipped: the decoder reports them.
func spotsOf(doc *yaml.Node) spots {
	s := spots{top: map[string]int{}}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return s
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		s.top[k.Value] = k.Line
		if v.Kind != yaml.SequenceNode {
			continue
		}
		switch k.Value {
		case "targets":
			s.targets = itemsOf(v)
		case "tools":
			s.tools = itemsOf(v)
		case "grants":
			s.grants = itemsOf(v)
		}
	}
	return s
}

// itemsOf reads the items of a list of targets or tools; an item that is
// not a mapping is left out, as the decoder leaves it out.
func itemsOf(seq *yaml.Node) []itemSpots {
	var out []itemSpots
	for _, item := range seq.Content {
		if item.Kind != yaml.MappingNode {
			continue
		}
		is := itemSpots{line: item.Line, last: lastLine(item), keys: map[string]int{}}
		for i := 0; i+1 < len(item.Content); i += 2 {
			k, v := item.Content[i], item.Content[i+1]
			is.keys[k.Value] = k.Line
			switch k.Value {
			case "name":
				is.name = v.Value
			case "kind":
				is.kind = v.Value
			case "options":
				if v.Kind == yaml.MappingNode {
					for j := 0; j+1 < len(v.Content); j += 2 {
						is.keys["options."+v.Content[j].Value] = v.Content[j].Line
					}
				}
			}
		}
		out = append(out, is)
	}
	return out
}

// lastLine is the last line n's text reaches (its deepest last node).
func lastLine(n *yaml.Node) int {
	for len(n.Content) > 0 && n.Kind != yaml.AliasNode {
		n = n.Content[len(n.Content)-1]
	}
	return n.Line
}
