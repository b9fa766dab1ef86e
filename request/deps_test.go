package request_test

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// The users of the request's words name no store: the tools, the
// forwarder and the second store speak package request and reach a store
// through the interfaces they declare (decision 0140). This reads the
// imports of their production files, transitively, as `go list -deps`
// would.
func TestUsersDoNotImportTheLedger(t *testing.T) {
	for _, pkg := range []string{"front/mcptools", "delivery/forwarder", "store/clusterrec", "delivery/audit", "internal/maintenance"} {
		if path := importPath(t, pkg, "store/ledger"); path != nil {
			t.Errorf("%s imports ledger: %s", pkg, strings.Join(path, " -> "))
		}
	}
}

// The words themselves depend on no store.
func TestRequestImportsNoStore(t *testing.T) {
	for _, store := range []string{"store/ledger", "store/clusterrec"} {
		if path := importPath(t, "request", store); path != nil {
			t.Errorf("request imports %s: %s", store, strings.Join(path, " -> "))
		}
	}
}

// importPath is a chain of module imports from the package in directory
// from (relative to the module root) to the package want, or nil if there
// is none.
func importPath(t *testing.T, from, want string) []string {
	t.Helper()
	seen := map[string]bool{}
	var walk func(dir string) []string
	walk = func(dir string) []string {
		if seen[dir] {
			return nil
		}
		seen[dir] = true
		p, err := build.ImportDir(filepath.Join("..", filepath.FromSlash(dir)), 0)
		if err != nil {
			t.Fatalf("read package %s: %v", dir, err)
		}
		for _, imp := range p.Imports {
			sub, ok := strings.CutPrefix(imp, "ticketrelay/")
			if !ok {
				continue
			}
			if sub == want {
				return []string{dir, sub}
			}
			if rest := walk(sub); rest != nil {
				return append([]string{dir}, rest...)
			}
		}
		return nil
	}
	return walk(from)
}
