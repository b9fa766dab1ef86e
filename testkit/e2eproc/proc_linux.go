package e2eproc

import "syscall"

// DieWithParent is the SysProcAttr of a child that must not outlive the
// process that started it: the kernel sends it SIGKILL when its parent
// exits, so a killed or timed-out `go test` leaves no server behind. (The
// signal follows the OS thread that started the child; Go's runtime keeps
// its threads unless a goroutine exits while locked to one, which none of
// the callers do.)
func DieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
