package app_test

import (
	"testing"

	"ticketrelay/testkit/fixture"
)

// Every goroutine a test starts, the processes' services included, has
// stopped when the package's tests end.
func TestMain(m *testing.M) { fixture.VerifyNoLeaks(m) }
