//go:build !linux

package e2eproc

import "syscall"

// DieWithParent is nil where the kernel cannot signal a child when its
// parent exits (Pdeathsig is Linux only): stopping the children is left to
// the caller's cleanup.
func DieWithParent() *syscall.SysProcAttr { return nil }
