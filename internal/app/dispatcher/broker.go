package dispatcher

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/internal/app"
	"ticketrelay/internal/archetype"
	"ticketrelay/internal/backoff"
	"ticketrelay/store/clusterrec"
)

// The broker: the embedded one started (with its credentials), the
// connection, the stream; and how an operator points the nats CLI at the
// embedded one. The connection's settings for an external server are
// internal/app's (nats.go), shared with mcp-front.

// openBroker starts the embedded nats-server (without -nats), connects to
// the server and creates or updates the stream.
func (d *dispatcher) openBroker(ctx context.Context) error {
	natsOpts, err := d.o.broker.Options(d.env.Lookup)
	if err != nil {
		return err
	}
	storeDir, stageDir := filepath.Join(d.o.Data, "nats"), ""
	d.url = d.o.NATS
	if d.url == "" {
		var seedOpt nats.Option
		if stageDir, seedOpt, err = d.startEmbedded(ctx, storeDir); err != nil {
			return err
		}
		natsOpts = append(natsOpts, seedOpt)
	}
	nc, err := app.ConnectNATS(ctx, d.url, "ticketrelay-dispatcher", natsOpts, d.log)
	if err != nil {
		return err
	}
	d.OnClose(nc.Close)
	d.nc = nc
	// A message answered "no stream" ends the relay's wait for messages
	// sent before it, which may have gone with the stream (natsjs.StreamGone).
	gone := natsjs.NewStreamGone()
	d.pubOpts = append(d.pubOpts, natsjs.AbandonOn(gone))
	if d.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096), jetstream.WithPublishAsyncTimeout(10*time.Second),
		jetstream.WithPublishAsyncErrHandler(gone.Handler)); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if d.st, err = ensureStream(ctx, d.js, d.stream, d.log); err != nil {
		return cmp.Or(ctx.Err(), err) // stopped while waiting: the stop, not what it interrupted
	}
	if d.o.NATS == "" {
		// The embedded server never fsyncs the directories it made the
		// stream in: until this, a power cut could take them, and every
		// acknowledged message with them.
		if err := natsjs.SyncStoreDirs(storeDir); err != nil {
			return err
		}
	}
	d.publisherOptions(storeDir, stageDir)
	return nil
}

// startEmbedded starts the embedded nats-server on storeDir and returns
// the directory it stages atomic batches in ("": the store) and the
// client option of its credential: it admits the holder of the seed in the
// data directory only (see natsjs.LoadOrCreateSeed).
func (d *dispatcher) startEmbedded(ctx context.Context, storeDir string) (stageDir string, seedOpt nats.Option, err error) {
	if stageDir, err = resolveStageDir(d.o.NATSStageDir, storeDir); err != nil {
		d.log.Warn("atomic batches are staged on disk", "err", err)
	} else if stageDir != "" && d.o.NATSStageDir == "auto" {
		d.OnClose(func() { os.Remove(stageDir) }) // empty once every batch has committed; runs after the server's shutdown
	}
	pub, seedOpt, seedPath, err := embeddedAuth(d.o.Data)
	if err != nil {
		return "", nil, err
	}
	ns, err := natsjs.StartEmbeddedContext(ctx, natsjs.EmbeddedConfig{Listen: d.o.NATSListen, StoreDir: storeDir, Users: []string{pub}},
		slog.New(noticesAtDebug{d.log.Handler()}))
	if errors.Is(err, syscall.EADDRINUSE) {
		return "", nil, app.ListenError("nats-listen", d.o.NATSListen, err)
	}
	if err != nil {
		return "", nil, err
	}
	d.OnClose(ns.WaitForShutdown)
	d.OnClose(ns.Shutdown)
	d.url = ns.ClientURL()
	d.addrs["nats"] = d.url
	if err := writeBrokerInfo(d.o.Data, brokerInfo{URL: d.url, Nkey: seedPath, Stream: d.stream.Name}); err != nil {
		d.log.Warn("`dispatcher status` will not say how to reach the embedded nats-server", "err", err)
	}
	return stageDir, seedOpt, nil
}

// publisherOptions are the relay's publisher's: atomic batches where the
// server takes them, staged in memory where it can.
func (d *dispatcher) publisherOptions(storeDir, stageDir string) {
	if stageDir != "" {
		if err := natsjs.StageBatchesIn(storeDir, d.stream.Name, stageDir); err != nil {
			d.log.Warn("atomic batches are staged on disk", "err", err)
		} else {
			d.log.Info("atomic batches are staged in memory", "dir", stageDir)
			d.pubOpts = append(d.pubOpts, natsjs.MinAtomicBatch(natsjs.MemoryMinAtomicBatch))
		}
	}
	if natsjs.AllowsAtomicBatches(d.st) {
		d.pubOpts = append(d.pubOpts, natsjs.AtomicBatches(func(err error) {
			d.arch.Metrics.BatchFallbacks.Inc()
			d.log.Debug("atomic batch sent again message by message", "err", err)
		}))
	} else {
		d.log.Warn("the NATS server does not take atomic batches (nats-server 2.12+ does): the relay publishes message by message")
	}
	d.pubOpts = append(d.pubOpts, natsjs.ForInstallation(d.stream.Installation))
}

// noticesAtDebug logs the embedded nats-server's notices at debug level:
// its start-up banner (some 25 lines of versions, limits and paths) and
// the like say nothing an operator acts on, and drowned the dispatcher's
// own lines. Its warnings and errors keep their level; -log-level debug
// shows everything.
type noticesAtDebug struct{ slog.Handler }

// demote is the level a record of level l is logged at.
func demote(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

func (h noticesAtDebug) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, demote(l))
}

func (h noticesAtDebug) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return h.Handler.Handle(ctx, r)
}

func (h noticesAtDebug) WithAttrs(as []slog.Attr) slog.Handler {
	return noticesAtDebug{h.Handler.WithAttrs(as)}
}

func (h noticesAtDebug) WithGroup(name string) slog.Handler {
	return noticesAtDebug{h.Handler.WithGroup(name)}
}

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

// ensureStream waits for JetStream (an external server may be starting or
// unreachable for a while: the dispatcher backs off and keeps trying until it
// is stopped) and creates or updates the stream. A configuration error, and
// a server too old for ticketrelay, are final.
func ensureStream(ctx context.Context, js jetstream.JetStream, c natsjs.StreamConfig, log *slog.Logger) (jetstream.Stream, error) {
	return untilReady(ctx, log, "jetstream not ready; retrying", func(ctx context.Context) (jetstream.Stream, error) {
		return natsjs.EnsureStream(ctx, js, c)
	}, natsjs.ErrInvalidStream, natsjs.ErrForeignStream, natsjs.ErrServerTooOld)
}

// openBucket creates or updates the installation's request bucket,
// waiting for the cluster as ensureStream does.
func openBucket(ctx context.Context, arch archetype.Archetype, js jetstream.JetStream, cfg clusterrec.Config) (*clusterrec.Store, error) {
	return untilReady(ctx, arch.Logger, "request bucket not ready; retrying", func(ctx context.Context) (*clusterrec.Store, error) {
		return clusterrec.Open(ctx, arch, js, cfg)
	}, clusterrec.ErrForeignBucket)
}

// untilReady calls try, each call under a 10 s timeout, until it succeeds,
// fails with one of the final errors, or ctx ends; between calls it says
// why it waits and backs off.
func untilReady[T any](ctx context.Context, log *slog.Logger, waiting string, try func(context.Context) (T, error), final ...error) (T, error) {
	pace := backoff.Policy{Base: 200 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := try(cctx)
		cancel()
		if err == nil || ctx.Err() != nil || slices.ContainsFunc(final, func(f error) bool { return errors.Is(err, f) }) {
			return v, err
		}
		log.Warn(waiting, "err", err, "attempt", attempt)
		select {
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		case <-time.After(pace.Delay(attempt)):
		}
	}
}

// resolveStageDir turns -nats-stage-dir into a directory: "auto" is
// natsjs.MemoryStageDir under natsjs.DefaultStageRoot ("" where there is
// none), "" is none, anything else is created if missing.
func resolveStageDir(flag, storeDir string) (string, error) {
	switch flag {
	case "":
		return "", nil
	case "auto":
		return natsjs.MemoryStageDir(natsjs.DefaultStageRoot, storeDir)
	}
	if err := os.MkdirAll(flag, 0o700); err != nil {
		return "", fmt.Errorf("-nats-stage-dir: %w", err)
	}
	return flag, nil
}

func holderID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}
