// Command mcp-front serves ticketrelay's MCP tools over streamable HTTP or stdio.
package main

import (
	"os"

	"ticketrelay/internal/app"
)

func main() {
	app.TuneFrontGC(os.LookupEnv)
	app.Main(app.RunFront)
}
