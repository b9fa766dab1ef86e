package bench

import "syscall"

// childAttr makes a server die with the harness: no process outlives a
// killed `make bench`.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
