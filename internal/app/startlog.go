package app

import (
	"log/slog"
	"strings"

	"ticketrelay/config"
)

// NoConfig is what the start-up log says for a process run without -config.
const NoConfig = "none: built-in local target"

// LogConfig logs the configuration a process serves: the file's path (or
// NoConfig) and each target's name and kind, so that an operator sees in
// its start-up lines which file each process read and where its tickets
// go. more are the process's own attributes. The processes log it just
// before the line that says they serve, once nothing is left to fail at
// start: a refused start stays one line. Nothing else of a target is
// logged: an endpoint may carry a secret (a webhook URL often does), and
// the secrets themselves are in the environment, never in cfg's file.
func LogConfig(log *slog.Logger, path string, cfg *config.File, more ...any) {
	if path == "" {
		path = NoConfig
	}
	targets := make([]string, len(cfg.Targets))
	for i, t := range cfg.Targets {
		targets[i] = t.Name + " (" + t.Kind + ")"
	}
	log.Info("configuration", append([]any{"config", path, "targets", strings.Join(targets, ", ")}, more...)...)
}
