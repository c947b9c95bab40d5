package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"flotilla.dev/flotilla/hub/store"
)

// Reservation kinds and where they live in the store: outside every
// resource's prefix, so the watch cache and the API never see them.
const (
	reservationPrefix = "/flotilla.dev/allocations/"
	kindServiceIP     = "serviceips"
	kindNodePort      = "nodeports"
	// reservationGrace is how old a reservation no Service holds must be
	// before the repair at start frees it: younger ones may belong to a
	// Service another hub is writing right now.
	reservationGrace = 10 * time.Minute
)

// reservations records in the store which Service holds an address, as
// a key created only if absent: across hubs that share a store, the
// first to create the key has the address.
type reservations struct {
	st  store.Store
	now func() time.Time
	log *slog.Logger
}

func reservationKey(kind, value string) string { return reservationPrefix + kind + "/" + value }

// take reserves value for holder ("namespace/name"); false means someone
// else holds it.
func (r *reservations) take(ctx context.Context, kind, value, holder string) (bool, error) {
	if r == nil {
		return true, nil
	}
	stamp := holder + " " + r.now().UTC().Format(time.RFC3339)
	_, err := r.st.Create(ctx, reservationKey(kind, value), []byte(stamp))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, store.ErrExists):
		return false, nil
	}
	return false, fmt.Errorf("reserve %s %s: %w", kind, value, err)
}

// freeAll releases reservations; a failure only leaks an address until
// the next repair, so it is logged rather than returned.
func (r *reservations) freeAll(ctx context.Context, ips []string, ports []int32) {
	if r == nil {
		return
	}
	free := func(kind, value string) {
		if _, _, err := r.st.Delete(ctx, reservationKey(kind, value), 0); err != nil && !errors.Is(err, store.ErrNotFound) {
			r.log.Warn("releasing a Service address", "kind", kind, "value", value, "err", err)
		}
	}
	for _, ip := range ips {
		free(kindServiceIP, ip)
	}
	for _, p := range ports {
		free(kindNodePort, fmt.Sprint(p))
	}
}

// repair makes the reservations agree with the Services: every address a
// Service holds is reserved (Services stored before reservations existed),
// and a reservation no Service holds, older than reservationGrace, goes
// (its hub stopped between reserving and writing the Service, or between
// deleting it and releasing).
func (r *reservations) repair(ctx context.Context, held map[string]map[string]string) error {
	if r == nil {
		return nil
	}
	kvs, _, err := r.st.List(ctx, reservationPrefix, 0)
	if err != nil {
		return fmt.Errorf("listing address reservations: %w", err)
	}
	have := map[string]bool{}
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.Key, reservationPrefix)
		kind, value, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		have[kv.Key] = true
		if _, ok := held[kind][value]; ok {
			continue
		}
		_, stamp, _ := strings.Cut(string(kv.Value), " ")
		at, err := time.Parse(time.RFC3339, stamp)
		if err == nil && r.now().Sub(at) < reservationGrace {
			continue
		}
		if _, _, err := r.st.Delete(ctx, kv.Key, kv.ModRevision); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("freeing the stale reservation %s: %w", kv.Key, err)
		}
		r.log.Info("freed an address no Service holds", "kind", kind, "value", value, "reserved", string(kv.Value))
	}
	for kind, values := range held {
		for value, holder := range values {
			if have[reservationKey(kind, value)] {
				continue
			}
			if _, err := r.take(ctx, kind, value, holder); err != nil {
				return err
			}
		}
	}
	return nil
}
