package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"ticketrelay/tracing"
)

// tracingFlush bounds the flush of the spans still buffered at exit: an
// unreachable collector must not hold the process's stop.
const tracingFlush = 5 * time.Second

// StartTracing sets up the process's tracing from the OTEL_* variables
// (off unless they ask for it; docs/operations.md#tracing) and returns what
// flushes it at exit. A refused value is an error naming the variable.
func StartTracing(ctx context.Context, service string, env Env, log *slog.Logger) (stop func(), err error) {
	flush, err := tracing.Start(ctx, service, env.Lookup, log)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	return func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlush)
		defer cancel()
		if err := flush(fctx); err != nil {
			log.Warn("tracing: spans not flushed at exit", "err", err)
		}
	}, nil
}
