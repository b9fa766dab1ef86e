package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"ticketrelay/internal/failpoint"
	"ticketrelay/internal/flagenv"
)

// Usage is a process's command line as -help and usage errors show it.
type Usage struct {
	// Synopsis is the short usage, its command lines ("Usage: mcp-front
	// [flags]\n"): first in -help, and after a flag error, where it
	// replaces the list of every flag.
	Synopsis string
	// About says what the process does, below the synopsis in -help.
	About string
	// Flags lays out the flags: sections under headings, hidden ones.
	Flags *flagenv.Help
}

// envNote tells the reader of -help how the environment twins work.
const envNote = "A flag shown with an environment variable (env TICKETRELAY_...) can also be\n" +
	"set with it; the command line wins over the environment.\n"

// Print writes the whole -help of fs to w: synopsis, what the process does,
// then the flags, section by section.
func (u Usage) Print(w io.Writer, fs *flag.FlagSet, noEnv ...string) {
	fmt.Fprint(w, u.Synopsis)
	if u.About != "" {
		fmt.Fprint(w, "\n"+u.About)
	}
	fmt.Fprint(w, "\n"+envNote)
	u.help().Print(w, fs, noEnv...)
}

func (u Usage) help() *flagenv.Help {
	if u.Flags == nil {
		return new(flagenv.Help)
	}
	return u.Flags
}

// FlagError is the usage error of a command line fs could not parse: the
// parse error, the synopsis and where to find the flags (-help), not the
// flags themselves.
func (u Usage) FlagError(fs *flag.FlagSet, err error) error {
	return fmt.Errorf("%w: %v\n%srun %s -help for the flags", ErrUsage, err, u.Synopsis, fs.Name())
}

// ParseStart parses a process's flags (with their environment twins), arms the
// failpoints and builds the stderr logger from the -log-level flag. done is
// true when -help or -version was asked and answered (on stdout): the
// caller has nothing more to do. A flag the process does not know is a
// usage error with the synopsis and a pointer to -help, not the whole flag
// list. An argument
// left after the flags (a mistyped subcommand, a flag after a stray word: the
// flag package stops at the first non-flag) is a usage error; commands, if
// any, are listed in its message.
func ParseStart(fs *flag.FlagSet, env Env, usage Usage, logLevel *string, commands ...string) (set map[string]bool, log *slog.Logger, done bool, err error) {
	var version *bool
	usage.help().Section(flagenv.Common, fs, func() { version = fs.Bool("version", false, "print the version and exit") })
	// The flag package prints a parse error and then the usage; both are
	// ours to print: the error once (by Main), the whole usage on -help
	// only.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	// -version has no environment twin: a TICKETRELAY_VERSION set for
	// some other purpose must not turn the service into a version print.
	set, err = flagenv.ParseExcept(fs, env.Args, env.Lookup, "version")
	fs.SetOutput(env.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		// Asked for, so it is the output: on stdout, where a pager or
		// grep reads it. Nothing else is served on this run.
		usage.Print(env.Stdout, fs, "version")
		return nil, nil, true, nil
	}
	if err != nil {
		return nil, nil, false, usage.FlagError(fs, err)
	}
	if *version {
		fmt.Fprintf(env.Stdout, "%s %s\n", fs.Name(), Version)
		return nil, nil, true, nil
	}
	if fs.NArg() > 0 {
		return nil, nil, false, leftoverError(fs.Name(), fs.Arg(0), commands)
	}
	if err := failpoint.Init(); err != nil {
		return nil, nil, false, err
	}
	if log, err = newLogger(env.Stderr, *logLevel); err != nil {
		return nil, nil, false, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	return set, log, false, nil
}

// leftoverError is the usage error for an argument no flag took.
func leftoverError(prog, arg string, commands []string) error {
	msg := fmt.Sprintf("unknown command or argument %q", arg)
	switch {
	case slices.Contains(commands, arg):
		msg += fmt.Sprintf(": a command comes before the flags (%s %s -data DIR ...)", prog, arg)
	case len(commands) > 0:
		msg += fmt.Sprintf("; the commands are %s (%s -help)", strings.Join(commands, ", "), prog)
	default:
		msg += fmt.Sprintf(": %s takes flags only (%s -help)", prog, prog)
	}
	return fmt.Errorf("%w: %s", ErrUsage, msg)
}
