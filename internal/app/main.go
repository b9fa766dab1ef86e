package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// Main runs a process with the real environment, stops it on SIGINT or
// SIGTERM, and maps its error to an exit status (2 for usage errors).
func Main(run func(context.Context, Env) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, Env{
		Args: os.Args[1:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Lookup: os.LookupEnv,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[0], err)
		if errors.Is(err, ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// GCTuning is a process's garbage-collector setting: GOGC and a soft
// memory limit (GOMEMLIMIT), applied by TuneGC.
type GCTuning struct {
	Percent int
	Limit   int64
}

var (
	// FrontGC collects at 5× the live heap with a 40 MiB soft limit. Most of
	// a call's garbage is JSON decoding buffers that die at once; collecting
	// less often cut server CPU per call to 0.82× in make bench (A/B, same
	// build), with peak RSS unchanged.
	FrontGC = GCTuning{Percent: 400, Limit: 40 << 20}
	// DispatcherGC keeps Go's default pace under a 30 MiB soft limit: the
	// embedded nats-server's buffers made the heap, and so the peak RSS of
	// make bench scenario 7, grow to 69 MB; with the limit 52 MB, at the
	// same CPU per ticket.
	DispatcherGC = GCTuning{Percent: 100, Limit: 30 << 20}
)

// TuneGC applies g unless the operator set GOGC or GOMEMLIMIT.
func TuneGC(lookup func(string) (string, bool), g GCTuning) {
	if _, set := lookup("GOGC"); !set {
		debug.SetGCPercent(g.Percent)
	}
	if _, set := lookup("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(g.Limit)
	}
}
