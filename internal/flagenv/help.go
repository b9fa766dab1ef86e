package flagenv

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
)

// Common is the heading of the flags most runs set: -help shows them
// first, so that a reader finds them without going through every bound
// and tuning knob.
const Common = "Common flags"

// otherHeading shows the flags declared in no section, so that a flag
// never goes missing from -help because its section was forgotten.
const otherHeading = "Other flags"

// Help is the layout of a flag set's -help: its flags in sections, each
// under a heading, and the hidden ones (accepted, not shown). A flag's
// section is given where the flag is declared (Section, Hide). The zero
// Help shows every flag under "Flags".
type Help struct {
	sections []section
	hidden   []string
}

type section struct {
	heading string
	names   []string
}

// Section has -help show the flags that define declares on fs under
// heading. Sections are shown in the order they were first declared; a
// heading declared again adds to its section. Within a section the flags
// are in alphabetical order.
func (h *Help) Section(heading string, fs *flag.FlagSet, define func()) {
	names := declared(fs, define)
	for i := range h.sections {
		if h.sections[i].heading == heading {
			h.sections[i].names = append(h.sections[i].names, names...)
			return
		}
	}
	h.sections = append(h.sections, section{heading: heading, names: names})
}

// Hide declares the flags that define declares on fs as hidden: accepted
// like any other (with their environment twins) but not in -help. They
// are for benchmarks and tests, documented where those are.
func (h *Help) Hide(fs *flag.FlagSet, define func()) {
	h.hidden = append(h.hidden, declared(fs, define)...)
}

// declared runs define and returns the names of the flags it declared on fs.
func declared(fs *flag.FlagSet, define func()) []string {
	before := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { before[f.Name] = true })
	define()
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if !before[f.Name] {
			names = append(names, f.Name)
		}
	})
	return names
}

// Print writes fs's flags to w, section by section: each flag with its
// placeholder, its environment twin (none for the flags in noEnv) and its
// default, then what it does. A default is the flag's own, whatever the
// environment set since.
func (h *Help) Print(w io.Writer, fs *flag.FlagSet, noEnv ...string) {
	placed := map[string]bool{}
	for _, n := range h.hidden {
		placed[n] = true
	}
	for _, s := range h.sections {
		var flags []*flag.Flag
		for _, n := range s.names {
			if f := fs.Lookup(n); f != nil {
				flags = append(flags, f)
				placed[n] = true
			}
		}
		printSection(w, s.heading, flags, noEnv)
	}
	var rest []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !placed[f.Name] {
			rest = append(rest, f)
		}
	})
	heading := otherHeading
	if len(h.sections) == 0 {
		heading = "Flags"
	}
	printSection(w, heading, rest, noEnv)
}

func printSection(w io.Writer, heading string, flags []*flag.Flag, noEnv []string) {
	if len(flags) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", heading)
	for _, f := range flags {
		printFlag(w, f, !slices.Contains(noEnv, f.Name))
	}
}

// helpWidth is the column -help wraps the flags' descriptions at.
const helpWidth = 80

// descIndent starts each line of a flag's description.
const descIndent = "        "

// printFlag writes one flag: "  -name placeholder  (env TWIN, default V)"
// and its description, wrapped, on the lines below.
func printFlag(w io.Writer, f *flag.Flag, twin bool) {
	placeholder, usage := flag.UnquoteUsage(f)
	line := "  -" + f.Name
	if placeholder != "" {
		line += " " + placeholder
	}
	var notes []string
	if twin {
		notes = append(notes, "env "+EnvName(f.Name))
	}
	if !isZeroValue(f) {
		def := f.DefValue
		if isString(f) {
			def = fmt.Sprintf("%q", def)
		}
		notes = append(notes, "default "+def)
	}
	if len(notes) > 0 {
		line += "  (" + strings.Join(notes, ", ") + ")"
	}
	fmt.Fprintln(w, line)
	for _, l := range wrap(usage, helpWidth-len(descIndent)) {
		fmt.Fprintln(w, descIndent+l)
	}
}

// wrap breaks text into lines of at most width columns, at spaces (a word
// longer than width gets a line of its own).
func wrap(text string, width int) []string {
	var lines []string
	var cur strings.Builder
	for word := range strings.FieldsSeq(text) {
		if cur.Len() > 0 && cur.Len()+1+len(word) > width {
			lines = append(lines, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(word)
	}
	if cur.Len() > 0 {
		lines = append(lines, cur.String())
	}
	return lines
}

// isZeroValue reports whether f's default is its type's zero value, which
// -help leaves unsaid (as the flag package's PrintDefaults does): "0",
// "false", "", or a custom value's own zero ("auto").
func isZeroValue(f *flag.Flag) (zero bool) {
	t := reflect.TypeOf(f.Value)
	var z reflect.Value
	if t.Kind() == reflect.Pointer {
		z = reflect.New(t.Elem())
	} else {
		z = reflect.Zero(t)
	}
	v, ok := z.Interface().(flag.Value)
	if !ok {
		return false
	}
	// A custom value's String may not expect its zero value.
	defer func() {
		if recover() != nil {
			zero = false
		}
	}()
	return f.DefValue == v.String()
}

// isString reports whether f holds a string, whose default -help quotes
// (an empty or spaced default reads unambiguously).
func isString(f *flag.Flag) bool {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	_, s := g.Get().(string)
	return s
}
