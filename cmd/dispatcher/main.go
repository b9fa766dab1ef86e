// Command dispatcher relays accepted tickets to JetStream and delivers them.
package main

import (
	"ticketrelay/internal/app"
)

func main() { app.Main(app.RunDispatcher) }
