package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/store"
	"flotilla.dev/flotilla/hub/store/boltstore"
	"flotilla.dev/flotilla/hub/store/etcdstore"
)

// migrateQuiet is how long migrate watches a source on etcd for writes
// before it copies: a hub serving it would renew a Lease within it.
const migrateQuiet = 5 * time.Second

func newMigrate() *cobra.Command {
	var from, to, prefix string
	var quiet time.Duration
	cmd := &cobra.Command{
		Use:   "migrate --from bbolt:DATA_DIR|etcd:URL[,URL...] --to bbolt:DATA_DIR|etcd:URL[,URL...]",
		Short: "Copy every object from one store to another (bbolt to etcd, or back)",
		Long: `Copy every object from one store to another, in the order they were
written, so that a fleet moves from one hub on bbolt to several hubs on
etcd (or back). Stop every hub first: migrate refuses a bbolt file another
process has open, and a source on etcd that is written to while it watches
it. The target must be empty. Secrets are copied sealed: give the target's
hubs the source hub's DATA_DIR/pki. The source is left as it was.

  flotilla-hub migrate --from bbolt:/var/lib/flotilla/hub --to etcd:https://10.0.0.1:2379
  flotilla-hub migrate --from etcd:https://10.0.0.1:2379 --to bbolt:/var/lib/flotilla/hub

TLS to etcd takes the serve command's --etcd-cafile, --etcd-certfile and
--etcd-keyfile.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			ca, _ := f.GetString("etcd-cafile")
			cert, _ := f.GetString("etcd-certfile")
			key, _ := f.GetString("etcd-keyfile")
			tlsFiles := [3]string{ca, cert, key}
			ctx := cmd.Context()
			src, err := openMigrateStore(ctx, "--from", from, prefix, tlsFiles)
			if err != nil {
				return err
			}
			defer src.Close()
			dst, err := openMigrateStore(ctx, "--to", to, prefix, tlsFiles)
			if err != nil {
				return err
			}
			defer dst.Close()
			if strings.HasPrefix(from, "etcd:") {
				if err := checkQuiet(ctx, src, quiet); err != nil {
					return err
				}
			}
			n, err := migrate(ctx, src, dst)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "copied %d objects from %s to %s\n", n, from, to)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the store to copy from: bbolt:DATA_DIR or etcd:URL[,URL...]")
	cmd.Flags().StringVar(&to, "to", "", "the store to copy to (empty): bbolt:DATA_DIR or etcd:URL[,URL...]")
	cmd.Flags().StringVar(&prefix, "etcd-prefix", etcdstore.DefaultPrefix, "the etcd key prefix")
	cmd.Flags().DurationVar(&quiet, "quiet-period", migrateQuiet, "how long a source on etcd must see no write before it is copied")
	cmd.Flags().String("etcd-cafile", "", "CA bundle that verifies etcd's serving certificates")
	cmd.Flags().String("etcd-certfile", "", "client certificate for etcd")
	cmd.Flags().String("etcd-keyfile", "", "the key of --etcd-certfile")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// openMigrateStore opens "bbolt:DATA_DIR" or "etcd:URL,...".
func openMigrateStore(ctx context.Context, flag, spec, prefix string, tlsFiles [3]string) (store.Store, error) {
	kind, where, ok := strings.Cut(spec, ":")
	if !ok || where == "" {
		return nil, fmt.Errorf("%s %q: want bbolt:DATA_DIR or etcd:URL[,URL...]", flag, spec)
	}
	switch kind {
	case "bbolt":
		file := filepath.Join(where, "state.db")
		if flag == "--from" {
			if _, err := os.Stat(file); err != nil {
				return nil, fmt.Errorf("%s: %w", flag, err)
			}
		}
		st, err := boltstore.Open(file, boltstore.Options{HistoryLimit: -1, Logger: newLogger("warn")})
		if err != nil {
			return nil, fmt.Errorf("%s %s (is a hub running on it? stop it first): %w", flag, file, err)
		}
		return st, nil
	case "etcd":
		tlsCfg, err := (hub.EtcdConfig{CAFile: tlsFiles[0], CertFile: tlsFiles[1], KeyFile: tlsFiles[2], Endpoints: strings.Split(where, ",")}).TLSConfig()
		if err != nil {
			return nil, err
		}
		st, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: strings.Split(where, ","), TLS: tlsCfg, Prefix: prefix})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		return st, nil
	}
	return nil, fmt.Errorf("%s %q: want bbolt:DATA_DIR or etcd:URL[,URL...]", flag, spec)
}

// checkQuiet refuses a source something writes to: hubs serving it renew
// Leases every few seconds.
func checkQuiet(ctx context.Context, st store.Store, quiet time.Duration) error {
	before, _, err := st.Revision(ctx)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(quiet):
	}
	after, _, err := st.Revision(ctx)
	if err != nil {
		return err
	}
	if after != before {
		return fmt.Errorf("the source changed while migrate watched it for %v (revision %d to %d): a hub is serving it; stop every hub first", quiet, before, after)
	}
	return nil
}

// migrate copies every key of src into the empty dst, in the order the
// keys were last written, and returns how many it copied.
func migrate(ctx context.Context, src, dst store.Store) (int, error) {
	existing, _, err := dst.List(ctx, "/", 0)
	if err != nil {
		return 0, fmt.Errorf("reading the target: %w", err)
	}
	if len(existing) > 0 {
		return 0, fmt.Errorf("the target already holds %d objects (the first: %s): migrate copies into an empty store only", len(existing), existing[0].Key)
	}
	kvs, _, err := src.List(ctx, "/", 0)
	if err != nil {
		return 0, fmt.Errorf("reading the source: %w", err)
	}
	slices.SortFunc(kvs, func(a, b store.KV) int { return int(a.ModRevision - b.ModRevision) })
	for i, kv := range kvs {
		if _, err := dst.Create(ctx, kv.Key, kv.Value); err != nil {
			if errors.Is(err, store.ErrExists) {
				return i, fmt.Errorf("the target got %s while migrate ran: is a hub serving it? %w", kv.Key, err)
			}
			return i, fmt.Errorf("copying %s (%d of %d copied): %w", kv.Key, i, len(kvs), err)
		}
	}
	return len(kvs), nil
}
