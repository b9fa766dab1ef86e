package mcptools_test

import (
	"testing"

	"ticketrelay/testkit/fixture"
)

// Every goroutine a test starts has stopped when the package's tests end.
func TestMain(m *testing.M) { fixture.VerifyNoLeaks(m) }
