package front

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
)

func httpMux(mcpHandler http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpHandler)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	return mux
}

// debugLines logs each line written to it at debug level (stderr).
type debugLines struct{ log *slog.Logger }

func (d debugLines) Write(p []byte) (int, error) {
	for line := range strings.SplitSeq(string(p), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			d.log.Debug("stdio message", "message", line)
		}
	}
	return len(p), nil
}
