// Command loadgen runs ticketrelay's benchmark (`make bench`); see package bench.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"ticketrelay/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv); err != nil {
		stop()
		fmt.Fprintf(os.Stderr, "loadgen: %v\n", err)
		os.Exit(1)
	}
}
