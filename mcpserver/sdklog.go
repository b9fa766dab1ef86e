package mcpserver

import (
	"context"
	"log/slog"
)

// sdkLogger is the logger given to go-sdk. The SDK logs several INFO lines
// for every request without a session (protocol 2026-07-28): three per
// call, 240 bytes, enough at ~110 calls/s to pass journald's default rate
// limit, which then drops every line, errors included. It gets WARN and
// above, unless the process logs at DEBUG.
func sdkLogger(log *slog.Logger) *slog.Logger {
	if log.Enabled(context.Background(), slog.LevelDebug) {
		return log
	}
	return slog.New(minLevel{log.Handler(), slog.LevelWarn})
}

// minLevel drops records below level.
type minLevel struct {
	slog.Handler
	level slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(attrs), h.level}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.level}
}
