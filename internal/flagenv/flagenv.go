// Package flagenv gives every command-line flag an environment-variable twin
// (TICKETRELAY_<NAME>, dashes as underscores) and shows it in -help.
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
// environment twin: they are set from args only, and -help shows no twin
// for them.
func ParseExcept(fs *flag.FlagSet, args []string, lookup func(string) (string, bool), noEnv ...string) (map[string]bool, error) {
	set := map[string]bool{}
	var errs []string
	fs.VisitAll(func(f *flag.Flag) {
		if slices.Contains(noEnv, f.Name) {
			return
		}
		env := EnvName(f.Name)
		if !strings.Contains(f.Usage, env) {
			f.Usage += " (env " + env + ")"
		}
		if v, ok := lookup(env); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: %v", env, v, err))
			}
			set[f.Name] = true
		}
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid environment: %s", strings.Join(errs, "; "))
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set, nil
}
