package loggate

import (
	"context"
	"log/slog"
	"time"
)

// maxSDKMessages bounds the distinct go-sdk messages whose repeats are
// counted at once.
const maxSDKMessages = 1000

// SDKLogger is the logger given to go-sdk. The SDK logs several INFO lines for
// every request without a session (protocol 2026-07-28): three per call,
// enough under load to pass journald's default rate limit, which then drops
// every line, errors included (decision 0090 has the measurements). It gets
// WARN and above, unless the process logs at DEBUG.
//
// A client also makes it log at ERROR at will: "method invalid during
// initialization" for every POST without a session that is not initialize.
// So each distinct message at WARN and above (whatever its attributes) goes
// through at most once a minute; the next one that passes says how many
// were dropped since (dropped_since_last_line). Below WARN (only logged at
// DEBUG, which an operator asks for) nothing is dropped.
func SDKLogger(log *slog.Logger) *slog.Logger { return sdkLoggerAt(log, time.Now) }

// sdkLoggerAt is SDKLogger with a clock.
func sdkLoggerAt(log *slog.Logger, now func() time.Time) *slog.Logger {
	var h slog.Handler = log.Handler()
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		h = minLevel{h, slog.LevelWarn}
	}
	return slog.New(repeatGate{h, New(Every, maxSDKMessages, now)})
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

// repeatGate lets a record at WARN or above through only if gate passes
// its level and message, adding the count of those dropped since the last
// one that passed. Handlers derived by WithAttrs and WithGroup share gate.
type repeatGate struct {
	slog.Handler
	gate *Gate
}

func (h repeatGate) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.Handler.Handle(ctx, r)
	}
	pass, dropped := h.gate.Pass(r.Level.String() + " " + r.Message)
	if !pass {
		return nil
	}
	if dropped > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("dropped_since_last_line", dropped))
	}
	return h.Handler.Handle(ctx, r)
}

func (h repeatGate) WithAttrs(attrs []slog.Attr) slog.Handler {
	return repeatGate{h.Handler.WithAttrs(attrs), h.gate}
}

func (h repeatGate) WithGroup(name string) slog.Handler {
	return repeatGate{h.Handler.WithGroup(name), h.gate}
}
