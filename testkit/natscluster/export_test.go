package natscluster

// SetFreeAddr replaces how a node's addresses are picked, for a test that
// does not run in parallel; the returned function restores the default.
func SetFreeAddr(f func() (string, error)) (restore func()) {
	old := freeAddr
	freeAddr = f
	return func() { freeAddr = old }
}
