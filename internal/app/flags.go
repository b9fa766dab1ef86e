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

// Usage is what -help prints for a flag set: Header, then every flag but
// the Hidden ones. Hidden flags are accepted as any other (they keep their
// environment twins) but are for benchmarks and tests, documented where
// those are (bench/doc.go), not in -help.
type Usage struct {
	Header string
	Hidden []string
}

// print writes the usage of fs to w.
func (u Usage) print(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, u.Header)
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	shown.SetOutput(w)
	fs.VisitAll(func(f *flag.Flag) {
		if slices.Contains(u.Hidden, f.Name) {
			return
		}
		shown.Var(f.Value, f.Name, f.Usage)
		// The value may hold an environment twin's by now: -help shows
		// the flag's own default.
		shown.Lookup(f.Name).DefValue = f.DefValue
	})
	shown.PrintDefaults()
}

// ParseStart parses a process's flags (with their environment twins), arms the
// failpoints and builds the stderr logger from the -log-level flag. done is
// true when -help or -version was asked and answered: the caller has
// nothing more to do. A flag the process does not know is a usage error of
// one line and a pointer to -help, not the whole flag list. An argument
// left after the flags (a mistyped subcommand, a flag after a stray word: the
// flag package stops at the first non-flag) is a usage error; commands, if
// any, are listed in its message.
func ParseStart(fs *flag.FlagSet, env Env, usage Usage, logLevel *string, commands ...string) (set map[string]bool, log *slog.Logger, done bool, err error) {
	version := fs.Bool("version", false, "print the version and exit")
	// The flag package prints a parse error and then the usage; both are
	// ours to print: the error once (by Main), the usage on -help only.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	// -version has no environment twin: a TICKETRELAY_VERSION set for
	// some other purpose must not turn the service into a version print.
	set, err = flagenv.ParseExcept(fs, env.Args, env.Lookup, "version")
	fs.SetOutput(env.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		usage.print(fs, env.Stderr)
		return nil, nil, true, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("%w: %v\nrun %s -help for all flags", ErrUsage, err, fs.Name())
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
