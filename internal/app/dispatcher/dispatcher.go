// Package dispatcher builds the dispatcher from its flags (and runs its
// status, redrive and resolve commands): it is the one place where its
// configuration becomes components. cmd/dispatcher only calls Run.
package dispatcher

import (
	"context"
	"flag"

	"ticketrelay/internal/app"
)

// usageHeader is the start of -help.
const usageHeader = "Usage: dispatcher [flags]\n\nRelays accepted tickets to JetStream and delivers them to their targets.\n\n" + adminUsage + "\nFlags:\n"

// Run runs the dispatcher (relay and forwarder) until ctx is cancelled:
// options, validated, then built, then run.
func Run(ctx context.Context, env app.Env) error {
	if len(env.Args) > 0 && adminCommands[env.Args[0]] != nil {
		return runAdmin(ctx, env.Args[0], env)
	}
	var o Options
	fs := flag.NewFlagSet("dispatcher", flag.ContinueOnError)
	o.flags(fs)
	_, log, done, err := app.ParseStart(fs, env, app.Usage{Header: usageHeader}, &o.LogLevel, adminCommandNames...)
	if done || err != nil {
		return err
	}
	o = o.WithDefaults()
	if err := o.Validate(env.Lookup); err != nil {
		return err
	}
	d := &dispatcher{o: o, env: env, log: log, addrs: map[string]string{}}
	defer d.Close()
	return app.BuildThenRun(ctx, d.build, d.run)
}
