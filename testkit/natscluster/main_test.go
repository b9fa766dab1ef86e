package natscluster_test

import (
	"os"
	"testing"

	"ticketrelay/testkit/natscluster"
)

func TestMain(m *testing.M) {
	os.Exit(natscluster.RunTests(m))
}
