// Package flagenv gives every command-line flag an environment-variable twin
// (TICKETRELAY_<NAME>, dashes as underscores), and lays out -help: the
// flags in sections under headings, each with its twin and its default.
package flagenv

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

// Prefix of every environment variable.
const Prefix = "TICKETRELAY_"

// EnvName is the environment twin of flag name.
func EnvName(name string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Parse applies environment values to fs's flags, then parses args (flags
// win over the environment). It returns the names of flags set either way.
func Parse(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) (map[string]bool, error) {
	return ParseExcept(fs, args, lookup)
}

// ParseExcept is Parse for a flag set whose flags named in noEnv have no
// environment twin: they are set from args only (pass the same names to
// Help.Print, which then shows no twin for them).
func ParseExcept(fs *flag.FlagSet, args []string, lookup func(string) (string, bool), noEnv ...string) (map[string]bool, error) {
	set := map[string]bool{}
	var errs []string
	fs.VisitAll(func(f *flag.Flag) {
		if slices.Contains(noEnv, f.Name) {
			return
		}
		env := EnvName(f.Name)
		if v, ok := lookup(env); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: %v", env, v, err))
			}
			set[f.Name] = true
		}
	})
	// The command line first: -help is answered even in an environment
	// with a bad value, and a flag's own error comes before the
	// environment's.
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid environment: %s", strings.Join(errs, "; "))
	}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set, nil
}
