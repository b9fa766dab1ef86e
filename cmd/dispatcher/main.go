// Command dispatcher relays accepted tickets to JetStream and delivers them.
package main

import (
	"os"

	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
)

func main() {
	app.StopMemProfile(os.LookupEnv)
	app.TuneGC(os.LookupEnv, app.DispatcherGC)
	app.Main(dispatcher.Run)
}
