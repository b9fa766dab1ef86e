package natscluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"ticketrelay/testkit/e2eproc"
)

// ServerPackage is what Build builds: the nats-server main package at the
// version go.mod pins, so the cluster runs the same server code as the
// embedded one.
const ServerPackage = "github.com/nats-io/nats-server/v2"

// Build builds nats-server from the module's pinned nats-server/v2 into
// dir (created if need be) and returns the binary's path. The go command
// runs in the module root; its output goes to stderr.
func Build(ctx context.Context, dir string) (string, error) {
	root, err := e2eproc.ModuleRoot()
	if err != nil {
		return "", fmt.Errorf("natscluster: building nats-server needs the ticketrelay module as working directory (or pass a prebuilt binary): %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nats-server")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ServerPackage)
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("natscluster: building %s: %w", ServerPackage, err)
	}
	return bin, nil
}
