// Package multihost_test runs several hosts of one installation (each its
// own mcp-front, dispatcher and SQLite file, real processes) on a real
// 3-node nats-server cluster, with downstream fakes shared by all hosts.
package multihost_test

import (
	"fmt"
	"os"
	"testing"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/natscluster"
)

var frontBin, dispatcherBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := e2eproc.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/multihost:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "ticketrelay-multihost-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/multihost:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if frontBin, dispatcherBin, err = e2eproc.Build(root, dir); err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/multihost:", err)
		return 1
	}
	return natscluster.RunTests(m)
}
