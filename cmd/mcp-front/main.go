// Command mcp-front serves ticketrelay's MCP tools over streamable HTTP or stdio.
package main

import (
	"ticketrelay/internal/app"
)

func main() { app.Main(app.RunFront) }
