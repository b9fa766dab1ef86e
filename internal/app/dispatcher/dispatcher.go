// Package dispatcher builds the dispatcher from its flags (and runs its
// operator commands: status, redrive, resolve, forget-host, help): it is
// the one place where its configuration becomes components. cmd/dispatcher
// only calls Run.
package dispatcher

import (
	"context"
	"flag"

	"ticketrelay/internal/app"
)

// Run runs the dispatcher (relay and forwarder) until ctx is cancelled:
// options, validated, then built, then run.
func Run(ctx context.Context, env app.Env) error {
	if len(env.Args) > 0 {
		if env.Args[0] == "help" {
			return runHelp(ctx, env)
		}
		if cmd, ok := commandNamed(env.Args[0]); ok {
			return runAdmin(ctx, cmd, env)
		}
	}
	var o Options
	fs := flag.NewFlagSet("dispatcher", flag.ContinueOnError)
	usage := app.Usage{Synopsis: synopsis, About: about(), Flags: o.flags(fs)}
	_, log, done, err := app.ParseStart(fs, env, usage, &o.LogLevel, commandNames()...)
	if done || err != nil {
		return err
	}
	o = o.WithDefaults()
	if err := o.Validate(env.Lookup); err != nil {
		return err
	}
	stopTracing, err := app.StartTracing(ctx, "dispatcher", env, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	d := &dispatcher{o: o, env: env, log: log, addrs: map[string]string{}}
	defer d.Close()
	return app.BuildThenRun(ctx, d.build, d.run)
}
