package resume

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListWatch lists and watches through Hub, except that the
// informer's lists are answered from what the device stored until the hub
// has answered once: the informer then starts from the stored state and
// its watch resumes from the stored resourceVersion, so an agent that
// restarts (or a device that reboots) asks the hub only for what changed
// while it was gone. The hub is listed when it says that version has
// expired (410, past its window of recent writes), when nothing was
// stored, and for every list after it has answered.
type ListWatch struct {
	Hub *cache.ListWatch
	// Stored is the stored list with its resourceVersion; false when the
	// device holds no whole list to resume from.
	Stored func() (runtime.Object, bool)

	answered atomic.Bool // the hub opened a watch or answered a list
	expired  atomic.Bool // the hub refused the stored version
	// resumed is the version the store answered the first list with,
	// until the hub has been asked whether it has reached it.
	resumed atomic.Pointer[string]
}

var (
	_ cache.ListerWatcher            = (*ListWatch)(nil)
	_ cache.ListerWatcherWithContext = (*ListWatch)(nil)
)

// IsWatchListSemanticsUnSupported makes the reflector list, then watch
// from the list's version: the list is where the store answers.
func (l *ListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// Answered reports whether the hub has answered: until then the
// informer may hold only what the device stored.
func (l *ListWatch) Answered() bool { return l.answered.Load() }

func (l *ListWatch) List(o metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), o)
}

func (l *ListWatch) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), o)
}

func (l *ListWatch) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	if !l.answered.Load() && !l.expired.Load() {
		if obj, ok := l.Stored(); ok {
			if acc, err := meta.ListAccessor(obj); err == nil {
				rv := acc.GetResourceVersion()
				l.resumed.Store(&rv)
			}
			return obj, nil
		}
	}
	obj, err := l.Hub.ListWithContext(ctx, o)
	if err == nil {
		l.answered.Store(true)
	}
	return obj, err
}

func (l *ListWatch) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	if rv := l.resumed.Load(); rv != nil {
		if err := l.checkReached(ctx, *rv); err != nil {
			return nil, err
		}
	}
	w, err := l.Hub.WatchWithContext(ctx, o)
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

// checkReached is CheckReached for the first watch from a stored version.
func (l *ListWatch) checkReached(ctx context.Context, stored string) error {
	err := CheckReached(ctx, l.Hub.ListWithContext, stored)
	if err == nil || isExpired(err) {
		l.resumed.Store(nil)
	}
	if isExpired(err) {
		l.expired.Store(true)
	}
	return err
}

// CheckReached asks the hub for its current version (a list of at most
// one object, through list, which applies the watch's selectors) before a
// watch resumes
// from a stored version. A hub behind that version holds another history
// — restored from a backup, or migrated to a new store — and would start
// the watch at once and send nothing up to it (as kube-apiserver's watch
// cache does), so the device would miss what changed: the answer is then a
// 410, which makes a reflector list again. Other errors are the list's.
func CheckReached(ctx context.Context, list func(context.Context, metav1.ListOptions) (runtime.Object, error), stored string) error {
	obj, err := list(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return err
	}
	acc, err := meta.ListAccessor(obj)
	if err != nil {
		return nil
	}
	if hub := acc.GetResourceVersion(); hub != "" && NewerVersion(stored, hub) {
		return apierrors.NewResourceExpired(fmt.Sprintf("the stored resourceVersion %s is ahead of the hub's %s (a hub restored from a backup or moved to another store); listing again", stored, hub))
	}
	return nil
}

// isExpired is the reflector's test for a version the server no longer
// has.
func isExpired(err error) bool { return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) }

// NewerVersion reports whether resourceVersion a is after b. The hub's
// versions are revisions (integers); anything else counts as newer, so a
// version is never lost to a comparison it cannot make.
func NewerVersion(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return a != b
	}
	return x > y
}
