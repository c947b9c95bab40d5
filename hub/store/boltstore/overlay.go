package boltstore

import (
	"strings"
	"sync"
	"sync/atomic"

	"flotilla.dev/flotilla/hub/store"
)

// overlay holds what the log has and the b-tree does not have yet: every
// write acknowledged since the last checkpoint, as the newest state of
// each key written and as the events in revision order.
//
// Only the write loop adds (under mu), only a checkpoint prunes (under mu,
// after the b-tree has committed what it prunes), so a reader that finds a
// key missing here finds it in the b-tree as new as the overlay was, and a
// reader that copies what it needs under the read lock has a consistent
// picture at rev whatever happens after: events are never changed once
// added, and the events slice is replaced, not cut, by a prune.
type overlay struct {
	mu     sync.RWMutex
	base   int64 // the b-tree holds every revision through base
	rev    int64 // the newest acknowledged revision
	keys   map[string]pendingKey
	events []pendingEvent // revisions base+1 … rev

	// bytes is about what the overlay holds, for deciding when to
	// checkpoint and when writers must wait for one.
	bytes atomic.Int64
}

// pendingKey is the newest state of a key written since the checkpoint.
type pendingKey struct {
	value     []byte
	createRev int64
	modRev    int64 // of the last write; of the delete for a deleted key
	deleted   bool
}

// pendingEvent is one logged write: decoded for watchers and lists, and
// encoded as the events bucket stores it, for the checkpoint.
type pendingEvent struct {
	rec eventRecord
	raw []byte
}

// pendingOverhead is what a pending write costs beyond its bytes: the
// map entry, the event and the record.
const pendingOverhead = 200

func newOverlay(rev int64) *overlay {
	return &overlay{base: rev, rev: rev, keys: make(map[string]pendingKey)}
}

// add makes the events of one commit, the first at revision first, visible
// to readers. The caller (the write loop) has logged them.
func (o *overlay) add(first int64, events []pendingEvent) {
	var size int64
	o.mu.Lock()
	for i, e := range events {
		rev := first + int64(i)
		o.keys[e.rec.Key] = pendingKey{
			value:     e.rec.Value,
			createRev: e.rec.CreateRev,
			modRev:    rev,
			deleted:   e.rec.Type == store.EventDelete,
		}
		size += int64(len(e.raw) + len(e.rec.Key) + pendingOverhead)
	}
	o.events = append(o.events, events...)
	o.rev = first + int64(len(events)) - 1
	o.mu.Unlock()
	o.bytes.Add(size)
}

// prune forgets what the b-tree now holds: revisions through rev.
func (o *overlay) prune(rev int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := rev - o.base
	if n <= 0 {
		return
	}
	var size int64
	for _, e := range o.events[:n] {
		size += int64(len(e.raw) + len(e.rec.Key) + pendingOverhead)
	}
	// A new slice: readers may still hold the old one.
	o.events = append(make([]pendingEvent, 0, max(len(o.events)-int(n), 64)), o.events[n:]...)
	for k, p := range o.keys {
		if p.modRev <= rev {
			delete(o.keys, k)
		}
	}
	o.base = rev
	o.bytes.Add(-size)
}

// snapshot returns the revision the overlay is at, the revision the
// b-tree holds everything through, the events in between and, with
// withKeys, the pending state of the keys under prefix.
func (o *overlay) snapshot(prefix string, withKeys bool) (rev, base int64, events []pendingEvent, keys map[string]pendingKey) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if withKeys {
		for k, p := range o.keys {
			if strings.HasPrefix(k, prefix) {
				if keys == nil {
					keys = make(map[string]pendingKey)
				}
				keys[k] = p
			}
		}
	}
	return o.rev, o.base, o.events, keys
}

func (o *overlay) get(key string) (pendingKey, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	p, ok := o.keys[key]
	return p, ok
}

// current is the newest acknowledged revision.
func (o *overlay) current() int64 {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.rev
}

// checkpointed is the revision the b-tree holds every write through.
func (o *overlay) checkpointed() int64 {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.base
}
