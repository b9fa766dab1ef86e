package front

import (
	"context"
	"errors"
	"os"
	"strings"

	"ticketrelay/front/mcpstdio"
	"ticketrelay/internal/app"
)

// tellStdioClient returns err, the reason mcp-front cannot start. In stdio
// mode it first answers the client's requests with it (mcpstdio.Refuse):
// a client that only sees the process exit shows a closed connection, and
// the line on stderr ends up in a log file its user never opens. A
// terminal or /dev/null on stdin has no client to tell: the line on stderr
// is the message there, at once.
func tellStdioClient(ctx context.Context, env app.Env, o Options, err error) error {
	if !o.Stdio || env.Stdin == nil {
		return err
	}
	if f, ok := env.Stdin.(*os.File); ok {
		if st, serr := f.Stat(); serr == nil && st.Mode()&os.ModeCharDevice != 0 {
			return err
		}
	}
	reason := err.Error()
	if errors.Is(err, app.ErrUsage) {
		reason = strings.TrimPrefix(reason, app.ErrUsage.Error()+": ")
	}
	// Whether the client heard it or not, err is what the process exits with.
	_ = mcpstdio.Refuse(ctx, env.Stdin, env.Stdout, "mcp-front cannot start: "+reason, mcpstdio.RefuseWait)
	return err
}
