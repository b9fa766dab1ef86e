// Command mcp-front serves ticketrelay's MCP tools over streamable HTTP or stdio.
package main

import (
	"os"

	"ticketrelay/internal/app"
	"ticketrelay/internal/app/front"
)

func main() {
	app.StopMemProfile(os.LookupEnv)
	app.TuneGC(os.LookupEnv, app.FrontGC)
	app.Main(front.Run)
}
