// Command noopserver is scenario 2's baseline: the MCP server a developer
// gets from go-sdk's defaults. One tool, create_ticket, with the same
// argument shape as ticketrelay's, registered with the typed mcp.AddTool
// (schemas inferred from the Go types, arguments and results validated by
// the SDK) and a handler that does nothing; streamable HTTP with default
// options. It is a benchmark baseline, not part of ticketrelay.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	_ "net/http/pprof" // served only with -pprof
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type in struct {
	RequestID string   `json:"request_id" jsonschema:"idempotency key"`
	Title     string   `json:"title" jsonschema:"one-line summary"`
	Body      string   `json:"body,omitempty" jsonschema:"full description"`
	Priority  string   `json:"priority,omitempty" jsonschema:"low, normal, high or urgent"`
	Labels    []string `json:"labels,omitempty" jsonschema:"tags"`
}

type out struct {
	RequestID string    `json:"request_id"`
	TicketID  string    `json:"ticket_id"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	Replayed  bool      `json:"replayed"`
}

func createTicket(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, out, error) {
	return nil, out{RequestID: a.RequestID, TicketID: "noop", Status: "queued", CreatedAt: time.Now().UTC()}, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "streamable HTTP `address`; the endpoint is /mcp")
	addrFile := flag.String("addr-file", "", "write the listening addresses as JSON to this `file`")
	pprofAddr := flag.String("pprof", "", "serve net/http/pprof on this `address` (off by default)")
	flag.Parse()

	server := mcp.NewServer(&mcp.Implementation{Name: "noopserver", Version: "v0.0.1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "create_ticket", Description: "Does nothing."}, createTicket)
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))

	addrs := map[string]string{}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	addrs["mcp"] = ln.Addr().String()
	if *pprofAddr != "" {
		pl, err := net.Listen("tcp", *pprofAddr)
		if err != nil {
			log.Fatal(err)
		}
		addrs["pprof"] = pl.Addr().String()
		go http.Serve(pl, http.DefaultServeMux)
	}
	srv := &http.Server{Handler: mux}
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Fatal(err)
		}
	}()
	if *addrFile != "" {
		b, _ := json.Marshal(addrs)
		if err := os.WriteFile(*addrFile+".tmp", b, 0o644); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(*addrFile+".tmp", *addrFile); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Fprintf(os.Stderr, "noopserver on http://%s/mcp\n", addrs["mcp"])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
}
