package clusterrec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/internal/archetype"
	"ticketrelay/internal/backoff"
)

// Bind returns the store of cfg.Installation's existing bucket, waiting
// (and saying so) until a dispatcher of the installation has made it and
// the cluster answers, or ctx ends. mcp-front binds; the dispatcher, which
// owns the bucket's configuration, opens (Open).
func Bind(ctx context.Context, arch archetype.Archetype, js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	arch = arch.WithDefaults()
	log, now := arch.Logger, arch.Now
	if cfg.Host == "" {
		return nil, errors.New("clusterrec: no host id")
	}
	name := cfg.Installation.Bucket()
	pace := backoff.Policy{Base: 200 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		kv, err := js.KeyValue(cctx, name)
		var st jetstream.KeyValueStatus
		if err == nil {
			st, err = kv.Status(cctx)
		}
		cancel()
		if err == nil {
			info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
			if inst := info.Config.Metadata[metaInstallation]; inst != string(cfg.Installation) {
				return nil, fmt.Errorf("%w: bucket %s belongs to installation %q", ErrForeignBucket, name, inst)
			}
			cfg.MaxBytes = info.Config.MaxBytes
			return &Store{cfg: cfg, js: js, kv: kv, stream: "KV_" + name, log: log, now: now}, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("clusterrec: bucket %s: %w", name, ctx.Err())
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn("waiting for the installation's request bucket (a dispatcher makes it)", "bucket", name, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pace.Delay(attempt)):
		}
	}
}
