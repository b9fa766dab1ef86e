package loggate

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/testkit/testio"
)

// go-sdk gets WARN and above of an INFO logger (it logs lines of its own
// for every stateless request), everything of a DEBUG one.
func TestSDKLogger(t *testing.T) {
	for _, c := range []struct {
		level     slog.Level
		wantInfo  bool
		wantDebug bool
	}{
		{slog.LevelInfo, false, false},
		{slog.LevelDebug, true, true},
	} {
		var buf bytes.Buffer
		log := SDKLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: c.level})).With("component", "mcp"))
		log.Debug("sdk debug")
		log.Info("sdk info")
		log.WithGroup("g").Warn("sdk warn", "k", "v")
		out := buf.String()
		if strings.Contains(out, "sdk info") != c.wantInfo || strings.Contains(out, "sdk debug") != c.wantDebug ||
			!strings.Contains(out, "sdk warn") || !strings.Contains(out, "component=mcp") || !strings.Contains(out, "g.k=v") {
			t.Errorf("level %v: logged %q", c.level, out)
		}
		if log.Enabled(context.Background(), slog.LevelInfo) != c.wantInfo {
			t.Errorf("level %v: Enabled(INFO) = %v", c.level, !c.wantInfo)
		}
	}
}

// Each distinct message of the SDK at WARN and above goes through at most
// once a minute, whatever its attributes; the next one counts those
// dropped. Below WARN (logged only at DEBUG) nothing is dropped. The map of
// messages is bounded.
func TestSDKLoggerDropsRepeats(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var buf testio.Buffer
	log := sdkLoggerAt(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), clock)
	lines := func(s string) int { return strings.Count(buf.String(), s) }
	for i := range 50 {
		log.Error("method invalid during initialization", "method", fmt.Sprintf("m%d", i))
		log.With("session", i).Warn("other message")
		log.Debug("sdk debug")
	}
	if n := lines("method invalid during initialization"); n != 1 {
		t.Errorf("%d lines for 50 identical errors within a minute, want 1:\n%s", n, buf.String())
	}
	if n := lines("other message"); n != 1 {
		t.Errorf("%d lines for 50 identical warnings, want 1", n)
	}
	if n := lines("sdk debug"); n != 50 {
		t.Errorf("%d debug lines of 50 at DEBUG, want all", n)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	log.Error("method invalid during initialization", "method", "again")
	if n := lines("method invalid during initialization"); n != 2 || lines("method=again dropped_since_last_line=49") != 1 {
		t.Errorf("a minute later: want a second line counting the 49 dropped:\n%s", buf.String())
	}

	g := log.Handler().(repeatGate).gate
	for i := range 3 * maxSDKMessages {
		log.Error(fmt.Sprintf("calling x: error %d", i))
	}
	if n := g.Len(); n > maxSDKMessages {
		t.Errorf("%d messages remembered, bound %d", n, maxSDKMessages)
	}
}
