package app

import "net/http"

// Internals the tests of package app_test look at.
const (
	HTTPIdleTimeout    = httpIdleTimeout
	HTTPMaxHeaderBytes = httpMaxHeaderBytes
)

// ServerOf is s's http.Server, to check its timeouts.
func ServerOf(s *Server) *http.Server { return s.srv }

// ExitStatus is Main's report of a process's error.
var ExitStatus = exitStatus
