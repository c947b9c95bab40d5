package apiserver

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"

	"flotilla.dev/flotilla/api"
)

// A list with limit=N answers at most N items and a continue token for
// the rest; the pages of one list are the state at the first page's
// resourceVersion, as kube-apiserver serves them from etcd. The hub has
// no history store to read an old revision from: it rebuilds the state
// at the token's revision from the cache's current objects and the window
// of recent events, undone newest first. A token older than the window is
// answered 410 Gone with a token that continues, from the same key, at
// the current state (kube-apiserver's "inconsistent continue").

// continueToken is what a continue parameter carries (base64url JSON).
type continueToken struct {
	// V tells the format apart from other servers' tokens.
	V string `json:"v"`
	// RV is the list's revision; 0 means the current state.
	RV int64 `json:"rv"`
	// Start is the last key served: the next page starts after it.
	Start string `json:"start"`
}

const continueVersion = "flotilla.dev/v1"

func encodeContinue(rv int64, start string) string {
	b, _ := json.Marshal(continueToken{V: continueVersion, RV: rv, Start: start})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (continueToken, error) {
	var t continueToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return t, badRequest("continue %q is not a token this hub issued (not base64url): start the list again without it", s)
	}
	if err := json.Unmarshal(b, &t); err != nil || t.V != continueVersion || t.RV < 0 {
		return t, badRequest("continue %q is not a token this hub issued: start the list again without it", s)
	}
	return t, nil
}

// listPage is one page of a list: the objects, the revision they are the
// state at, and, when more remain, the token for them and their count.
type listPage struct {
	objs      []*cachedObject
	rev       int64
	next      string
	remaining int64
}

// parseLimit reads limit; 0 means no limit.
func parseLimit(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("limit %q is not a non-negative number", v)
	}
	if n > int64(^uint(0)>>1) {
		return 0, nil
	}
	return int(n), nil
}

// continueList serves a page after the first of a list.
func (s *Server) continueList(res *api.Resource, f *filter, tok continueToken) ([]*cachedObject, int64, error) {
	objs, rev, err := s.cache.listAt(res, f, tok.RV, tok.Start)
	if err == errTooOld {
		st := apierrors.NewResourceExpired(fmt.Sprintf(
			"the list's resourceVersion %d is too old for a consistent next page; start the list again, or continue with the token in this answer for the rest at the current state (objects changed meanwhile may be missed or seen twice)", tok.RV))
		st.ErrStatus.ListMeta.Continue = encodeContinue(0, tok.Start)
		return nil, 0, st
	}
	return objs, rev, err
}

// page cuts objs to limit, with the token for the rest.
func page(objs []*cachedObject, rev int64, limit int) listPage {
	p := listPage{objs: objs, rev: rev}
	if limit <= 0 || len(objs) <= limit {
		return p
	}
	p.objs, p.remaining = objs[:limit], int64(len(objs)-limit)
	p.next = encodeContinue(rev, objectCacheKey(objs[limit-1]))
	return p
}

// objectCacheKey is the cache's key of a cached object (its list order).
func objectCacheKey(co *cachedObject) string {
	m, err := meta.Accessor(co.obj)
	if err != nil {
		return ""
	}
	return cacheKey(m.GetNamespace(), m.GetName())
}

// listAt is list as the state was at revision rev (0: now), for keys after
// start only.
func (c *watchCache) listAt(res *api.Resource, f *filter, rev int64, start string) ([]*cachedObject, int64, error) {
	c.mu.RLock()
	if rev == 0 {
		rev = c.rev
	}
	if rev < c.oldest || rev > c.rev {
		c.mu.RUnlock()
		return nil, 0, errTooOld
	}
	state := map[string]*cachedObject{}
	for k, co := range c.objects[res] {
		if k > start {
			state[k] = co
		}
	}
	// Undo the changes made after rev, newest first.
	evs := c.byRes[res].after(rev)
	for i := len(evs) - 1; i >= 0; i-- {
		ev := evs[i]
		if ev.key <= start {
			continue
		}
		if ev.prev == nil {
			delete(state, ev.key)
		} else {
			state[ev.key] = ev.prev
		}
	}
	c.mu.RUnlock()
	out := make([]*cachedObject, 0, len(state))
	keys := make([]string, 0, len(state))
	for k, co := range state {
		if f.matches(co) {
			out, keys = append(out, co), append(keys, k)
		}
	}
	sort.Sort(byKey{keys, out})
	return out, rev, nil
}
