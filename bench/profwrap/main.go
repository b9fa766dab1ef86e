// Command profwrap is mcp-front (the same code: internal/app/front.Run) with
// a net/http/pprof listener on $BENCH_PPROF_ADDR, for `loadgen -pprof` to
// profile the server under load; with BENCH_PROFWRAP_APP=dispatcher it is
// the dispatcher instead (internal/app/dispatcher.Run, with its GC
// setting). Benchmarks only: the production binaries have no pprof
// listener, and turn Go's heap-profile sampling off (app.StopMemProfile),
// which profwrap keeps for its heap profiles.
package main

import (
	"log"
	"net/http"
	_ "net/http/pprof"
	"os"

	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
)

func main() {
	if addr := os.Getenv("BENCH_PPROF_ADDR"); addr != "" {
		go func() { log.Println(http.ListenAndServe(addr, http.DefaultServeMux)) }()
	}
	if os.Getenv("BENCH_PROFWRAP_APP") == "dispatcher" {
		app.TuneGC(os.LookupEnv, app.DispatcherGC)
		app.Main(dispatcher.Run)
		return
	}
	app.TuneGC(os.LookupEnv, app.FrontGC)
	app.Main(front.Run)
}
