package mcpserver

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
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
		log := sdkLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: c.level})).With("component", "mcp"))
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
