package apiserver

import (
	"sync"

	"k8s.io/apimachinery/pkg/selection"

	"flotilla.dev/flotilla/api"
)

// Watch dispatch by index. Most watchers of a fleet are devices, and each
// asks for its own share of a resource: its pods (spec.nodeName=<device>),
// its Node and Lease (metadata.name=<device>), its site's EndpointSlices
// (flotilla.dev/site in (<site>,fleet)). Offering every event to every
// watcher, for it to check its selector, costs events × watchers channel
// sends and goroutine wake-ups; with 10,000 devices a DaemonSet rollout is
// 10,000 pod events offered to 10,000 watchers each. Instead a watcher
// whose selector pins an index value is filed under that value, and an
// event goes to the watchers filed under its object's value (before and
// after the change) and to the watchers that pin none. The index only
// narrows who is offered an event: each watcher still applies its whole
// selector (eventEncoder.encode), so filing a watcher too widely costs
// time, never correctness; filing it too narrowly would lose events, so
// only selectors that require an exact value are filed.
type watchIndex struct {
	// value is the object's index value ("" when it has none).
	value func(co *cachedObject) string
	// keys are the values f requires of every object it selects; ok is
	// false when it requires none (the watcher gets every event).
	keys func(f *filter) (keys []string, ok bool)
}

// indexFor is res's watch index.
func indexFor(res *api.Resource) watchIndex {
	switch {
	case res.GVR.Group == "" && res.GVR.Resource == "pods":
		return fieldIndex("spec.nodeName")
	case res.GVR.Group == "discovery.k8s.io" && res.GVR.Resource == "endpointslices":
		return labelIndex(api.LabelSite)
	}
	return fieldIndex("metadata.name")
}

func fieldIndex(field string) watchIndex {
	return watchIndex{
		value: func(co *cachedObject) string { return co.fields[field] },
		keys: func(f *filter) ([]string, bool) {
			if field == "metadata.name" && f.name != "" {
				return []string{f.name}, true
			}
			if f.fields == nil {
				return nil, false
			}
			v, ok := f.fields.RequiresExactMatch(field)
			if !ok {
				return nil, false
			}
			return []string{v}, true
		},
	}
}

func labelIndex(key string) watchIndex {
	return watchIndex{
		// An object without the label has "": watchers of "" are offered
		// it and refuse it themselves, which is only a little waste.
		value: func(co *cachedObject) string { return co.labels[key] },
		keys: func(f *filter) ([]string, bool) {
			if f.labels == nil {
				return nil, false
			}
			reqs, _ := f.labels.Requirements()
			for _, r := range reqs {
				if r.Key() != key {
					continue
				}
				switch r.Operator() {
				case selection.In, selection.Equals, selection.DoubleEquals:
					return r.ValuesUnsorted(), true
				}
			}
			return nil, false
		},
	}
}

// watcherSet are the watchers of one resource, filed by index value.
// Watches join it under the cache's read lock, so it has a lock of its
// own; events are offered under both.
type watcherSet struct {
	mu    sync.Mutex
	index watchIndex
	// all is every watcher; unfiled those that pin no index value.
	all     map[*cacheWatcher]struct{}
	unfiled map[*cacheWatcher]struct{}
	filed   map[string]map[*cacheWatcher]struct{}
}

func newWatcherSet(res *api.Resource) *watcherSet {
	return &watcherSet{index: indexFor(res), all: map[*cacheWatcher]struct{}{},
		unfiled: map[*cacheWatcher]struct{}{}, filed: map[string]map[*cacheWatcher]struct{}{}}
}

func (s *watcherSet) add(w *cacheWatcher, f *filter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all[w] = struct{}{}
	keys, ok := s.index.keys(f)
	if !ok {
		s.unfiled[w] = struct{}{}
		return
	}
	w.keys = keys
	for _, k := range keys {
		ws := s.filed[k]
		if ws == nil {
			ws = map[*cacheWatcher]struct{}{}
			s.filed[k] = ws
		}
		ws[w] = struct{}{}
	}
}

func (s *watcherSet) removeLocked(w *cacheWatcher) {
	delete(s.all, w)
	delete(s.unfiled, w)
	for _, k := range w.keys {
		if ws := s.filed[k]; ws != nil {
			delete(ws, w)
			if len(ws) == 0 {
				delete(s.filed, k)
			}
		}
	}
}

// each calls fn once for every watcher ce may concern, with s.mu held. fn
// may remove the watcher it is given.
func (s *watcherSet) each(ce *cacheEvent, fn func(w *cacheWatcher)) {
	for w := range s.unfiled {
		fn(w)
	}
	if len(s.filed) == 0 {
		return
	}
	cur := s.index.value(ce.cur)
	for w := range s.filed[cur] {
		fn(w)
	}
	if ce.prev == nil {
		return
	}
	if prev := s.index.value(ce.prev); prev != cur {
		for w := range s.filed[prev] {
			if !w.filedUnder(cur) {
				fn(w)
			}
		}
	}
}

func (w *cacheWatcher) filedUnder(key string) bool {
	for _, k := range w.keys {
		if k == key {
			return true
		}
	}
	return false
}
