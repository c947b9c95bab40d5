package apiserver

import (
	"context"
	"errors"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/store"
)

// Event retention. kube-apiserver gives every Event an etcd lease of
// --event-ttl; the hub sweeps instead, the same way on bbolt and on etcd,
// so that Events never fill state.db or the watch cache.
const (
	DefaultEventTTL = time.Hour
	// DefaultMaxEventBytesPerObject bounds what the Events about one
	// object may hold (their encoded size): a pod in a crash loop with
	// ever-new messages, or a device that reports a flood about its own
	// Node, keeps its newest Events and loses its oldest.
	DefaultMaxEventBytesPerObject = 256 << 10
	eventSweepInterval            = 30 * time.Second
)

var eventsResource = func() *api.Resource {
	r, _ := api.ResourceFor(corev1.SchemeGroupVersion.WithResource("events"))
	return r
}()

// eventLastSeen is when an Event last happened: its series' last
// observation, its lastTimestamp or eventTime, or when it was made.
func eventLastSeen(e *corev1.Event) time.Time {
	t := e.CreationTimestamp.Time
	for _, c := range []time.Time{e.FirstTimestamp.Time, e.LastTimestamp.Time, e.EventTime.Time} {
		if c.After(t) {
			t = c
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}

// involvedKey names the object an Event is about.
func involvedKey(e *corev1.Event) string {
	o := e.InvolvedObject
	if o.UID != "" {
		return string(o.UID)
	}
	return o.Kind + "/" + o.Namespace + "/" + o.Name
}

type sweptEvent struct {
	key      string
	rev      int64
	size     int
	lastSeen time.Time
}

// expiredEvents picks the Events to delete at now: those last seen more
// than ttl ago, and the oldest of each object's Events past maxBytes.
func expiredEvents(objs []*cachedObject, now time.Time, ttl time.Duration, maxBytes int) []sweptEvent {
	var out []sweptEvent
	byObject := map[string][]sweptEvent{}
	for _, co := range objs {
		e, ok := co.obj.(*corev1.Event)
		if !ok {
			continue
		}
		se := sweptEvent{key: objectKey(eventsResource, e.Namespace, e.Name), rev: co.rev, size: len(co.json()), lastSeen: eventLastSeen(e)}
		if ttl > 0 && now.Sub(se.lastSeen) > ttl {
			out = append(out, se)
			continue
		}
		k := involvedKey(e)
		byObject[k] = append(byObject[k], se)
	}
	if maxBytes <= 0 {
		return out
	}
	for _, evs := range byObject {
		total := 0
		for _, e := range evs {
			total += e.size
		}
		if total <= maxBytes {
			continue
		}
		sort.Slice(evs, func(i, j int) bool {
			if !evs[i].lastSeen.Equal(evs[j].lastSeen) {
				return evs[i].lastSeen.Before(evs[j].lastSeen)
			}
			return evs[i].rev < evs[j].rev
		})
		for _, e := range evs {
			if total <= maxBytes {
				break
			}
			out = append(out, e)
			total -= e.size
		}
	}
	return out
}

// runEventExpiry deletes expired Events, and the oldest of an object's
// Events past its share, every eventSweepInterval. Several hubs on one
// etcd may sweep together: a deletion names the revision it saw, and one
// that lost the race is simply skipped.
func (s *Server) runEventExpiry(ctx context.Context) {
	ttl, maxBytes := s.cfg.EventTTL, s.cfg.MaxEventBytesPerObject
	if ttl == 0 {
		ttl = DefaultEventTTL
	}
	if maxBytes == 0 {
		maxBytes = DefaultMaxEventBytesPerObject
	}
	if ttl < 0 && maxBytes < 0 {
		return
	}
	every := eventSweepInterval
	if ttl > 0 {
		// A short TTL (tests, small devices' hubs) is swept at a quarter
		// of itself, so an Event outlives it by at most that.
		every = max(min(every, ttl/4), 100*time.Millisecond)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.sweepEvents(ctx, ttl, maxBytes)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) sweepEvents(ctx context.Context, ttl time.Duration, maxBytes int) {
	objs, _ := s.cache.list(eventsResource, &filter{})
	deleted := 0
	for _, e := range expiredEvents(objs, s.now(), ttl, maxBytes) {
		if ctx.Err() != nil {
			return
		}
		_, _, err := s.store.Delete(ctx, e.key, e.rev)
		switch {
		case err == nil:
			deleted++
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			// Updated (its count went up) or deleted meanwhile: the
			// next sweep looks again.
		default:
			s.log.Warn("deleting an expired Event", "key", e.key, "err", err)
		}
	}
	if deleted > 0 {
		s.metrics.eventsExpired.Add(float64(deleted))
		s.log.Debug("expired Events deleted", "count", deleted)
	}
}
