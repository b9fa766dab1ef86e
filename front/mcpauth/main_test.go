package mcpauth_test

import (
	"testing"

	stores "ticketrelay/testkit/fixture"
)

// Every goroutine a test starts has stopped when the package's tests end.
func TestMain(m *testing.M) { stores.VerifyNoLeaks(m) }
