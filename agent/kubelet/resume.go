package kubelet

import (
	"context"
	"strconv"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// resumingListWatch lists and watches through hub, except that the
// informer's lists are answered from what the device stored until the hub
// has answered once: the informer then starts from the stored state and
// its watch resumes from the stored resourceVersion, so an agent that
// restarts (or a device that reboots) asks the hub only for what changed
// while it was gone. The hub is listed when it says that version has
// expired (410, past its window of recent writes), when nothing was
// stored, and for every list after it has answered.
type resumingListWatch struct {
	hub *cache.ListWatch
	// stored is the stored list with its resourceVersion; false when the
	// device holds no whole list to resume from.
	stored func() (runtime.Object, bool)

	answered atomic.Bool // the hub opened a watch or answered a list
	expired  atomic.Bool // the hub refused the stored version
}

var (
	_ cache.ListerWatcher            = (*resumingListWatch)(nil)
	_ cache.ListerWatcherWithContext = (*resumingListWatch)(nil)
)

// IsWatchListSemanticsUnSupported makes the reflector list, then watch
// from the list's version: the list is where the store answers.
func (l *resumingListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// Answered reports whether the hub has answered: until then the
// informer may hold only what the device stored.
func (l *resumingListWatch) Answered() bool { return l.answered.Load() }

func (l *resumingListWatch) List(o metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), o)
}

func (l *resumingListWatch) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), o)
}

func (l *resumingListWatch) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	if !l.answered.Load() && !l.expired.Load() {
		if obj, ok := l.stored(); ok {
			return obj, nil
		}
	}
	obj, err := l.hub.ListWithContext(ctx, o)
	if err == nil {
		l.answered.Store(true)
	}
	return obj, err
}

func (l *resumingListWatch) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	w, err := l.hub.WatchWithContext(ctx, o)
	if err != nil {
		if isExpired(err) {
			l.expired.Store(true)
		}
		return nil, err
	}
	l.answered.Store(true)
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if ev.Type == watch.Error && isExpired(apierrors.FromObject(ev.Object)) {
			l.expired.Store(true)
		}
		return ev, true
	}), nil
}

// isExpired is the reflector's test for a version the server no longer
// has.
func isExpired(err error) bool { return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) }

// newerVersion reports whether resourceVersion a is after b. The hub's
// versions are revisions (integers); anything else counts as newer, so a
// version is never lost to a comparison it cannot make.
func newerVersion(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return a != b
	}
	return x > y
}
