package dispatcher

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"ticketrelay/natsjs"
)

// The embedded broker's credentials, and how an operator points the nats
// CLI at it. The connection to an external server is internal/app's
// (nats.go), shared with mcp-front.

// embeddedAuth makes (at the first start) or reads the seed the embedded
// server admits, and returns its public key and the client option that
// uses it.
func embeddedAuth(dataDir string) (pub string, opt nats.Option, seedPath string, err error) {
	seedPath, err = filepath.Abs(filepath.Join(dataDir, natsjs.SeedFile))
	if err != nil {
		return "", nil, "", fmt.Errorf("broker credentials: %w", err)
	}
	if pub, err = natsjs.LoadOrCreateSeed(seedPath); err != nil {
		return "", nil, "", err
	}
	if opt, err = nats.NkeyOptionFromSeed(seedPath); err != nil {
		return "", nil, "", fmt.Errorf("broker credentials: %w", err)
	}
	return pub, opt, seedPath, nil
}

// brokerInfoFile, in the data directory, tells `dispatcher status` where the
// embedded server listens and which credential opens it.
const brokerInfoFile = "nats.json"

type brokerInfo struct {
	URL    string `json:"url"`
	Nkey   string `json:"nkey"`
	Stream string `json:"stream"`
}

func writeBrokerInfo(dataDir string, bi brokerInfo) error {
	b, err := json.Marshal(bi)
	if err != nil {
		return err
	}
	path := filepath.Join(dataDir, brokerInfoFile)
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("%s: %w", brokerInfoFile, err)
	}
	return os.Rename(path+".tmp", path)
}

// printBrokerHint prints how to point the nats CLI at the embedded server
// the dispatcher of dataDir last ran; nothing if it runs none.
func printBrokerHint(out io.Writer, dataDir string) {
	b, err := os.ReadFile(filepath.Join(dataDir, brokerInfoFile))
	if err != nil {
		return
	}
	var bi brokerInfo
	if json.Unmarshal(b, &bi) != nil || bi.URL == "" {
		return
	}
	fmt.Fprintf(out, "\nembedded nats-server (as last started): %s, credential %s (an nkey seed: keep it private)\n"+
		"  nats --server %s --nkey %s stream info %s\n", bi.URL, bi.Nkey, bi.URL, bi.Nkey, bi.Stream)
}
