package apiserver

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func cachedEvent(t *testing.T, name, about string, last time.Time, size int, rev int64) *cachedObject {
	t.Helper()
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", CreationTimestamp: metav1.NewTime(last.Add(-time.Hour))},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: about, UID: types.UID("uid-" + about)},
		LastTimestamp:  metav1.NewTime(last)}
	raw, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if size > len(raw) {
		raw = append(raw, make([]byte, size-len(raw))...)
	}
	return &cachedObject{obj: e, raw: raw, rev: rev}
}

func TestExpiredEvents(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	objs := []*cachedObject{
		cachedEvent(t, "old", "a", now.Add(-2*time.Hour), 0, 1),
		cachedEvent(t, "fresh", "a", now.Add(-time.Minute), 0, 2),
		// b's Events hold 4 × 1000 bytes; 2500 allowed: the two oldest go.
		cachedEvent(t, "b1", "b", now.Add(-50*time.Minute), 1000, 3),
		cachedEvent(t, "b2", "b", now.Add(-40*time.Minute), 1000, 4),
		cachedEvent(t, "b3", "b", now.Add(-30*time.Minute), 1000, 5),
		cachedEvent(t, "b4", "b", now.Add(-20*time.Minute), 1000, 6),
	}
	// An Event whose series went on lately is not old.
	series := cachedEvent(t, "series", "c", now.Add(-3*time.Hour), 0, 7)
	series.obj.(*corev1.Event).Series = &corev1.EventSeries{Count: 9, LastObservedTime: metav1.NewMicroTime(now.Add(-time.Minute))}
	objs = append(objs, series)

	names := func(evs []sweptEvent) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.key[len(resourcePrefix(eventsResource)):])
		}
		slices.Sort(out)
		return out
	}
	if got := names(expiredEvents(objs, now, time.Hour, 2500)); !slices.Equal(got, []string{"shop/b1", "shop/b2", "shop/old"}) {
		t.Errorf("expired = %v, want shop/b1 shop/b2 (b's oldest past 2500 bytes) and shop/old (past the TTL)", got)
	}
	if got := names(expiredEvents(objs, now, -1, -1)); len(got) != 0 {
		t.Errorf("with no limits, expired = %v", got)
	}
	if got := names(expiredEvents(objs, now, 10*time.Hour, -1)); len(got) != 0 {
		t.Errorf("with a long TTL and no size limit, expired = %v", got)
	}
}
