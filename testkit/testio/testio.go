// Package testio holds small I/O helpers for tests.
package testio

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that many goroutines may write while a test
// reads it: a process's stderr, a logger's output.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
