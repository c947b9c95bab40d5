package apiserver_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"flotilla.dev/flotilla/hub/apiserver"
	"flotilla.dev/flotilla/hub/hubtest"
)

// isTooLargeRV says whether err is kube-apiserver's answer to a read at a
// resourceVersion it has not reached: 504 Timeout, retry after 1 s, with
// a ResourceVersionTooLarge cause (what client-go's reflectors look for).
func isTooLargeRV(err error) bool {
	se, ok := err.(*apierrors.StatusError)
	if !ok || se.ErrStatus.Code != http.StatusGatewayTimeout || se.ErrStatus.Details == nil || se.ErrStatus.Details.RetryAfterSeconds != 1 {
		return false
	}
	return apierrors.IsTimeout(err) && strings.Contains(err.Error(), "Too large resource version") &&
		slices.ContainsFunc(se.ErrStatus.Details.Causes, func(c metav1.StatusCause) bool { return c.Type == metav1.CauseTypeResourceVersionTooLarge })
}

// A list at a resourceVersion the hub has not reached waits for it 3 s at
// most, as kube-apiserver does, then answers 504; while it waits it holds
// no read slot, and the waits are capped.
func TestListAtAFutureResourceVersion(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Limits: apiserver.Limits{MaxReadOnlyInFlight: 5, MaxResourceVersionWaits: 20}})
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cur, err := h.Client.CoreV1().Services("default").List(c, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := strconv.ParseInt(cur.ResourceVersion, 10, 64)
	future := strconv.FormatInt(rev+1000, 10)
	dev := h.NodeClient("dev-1").CoreV1()
	services := dev.Services("default")

	// (client-go retries a 504 with a Retry-After ten times, against
	// kube-apiserver too: these lists do not.)
	list := func(rv string) error {
		return dev.RESTClient().Get().Namespace("default").Resource("services").Param("resourceVersion", rv).MaxRetries(0).Do(c).Error()
	}
	start := time.Now()
	err = list(future)
	if took := time.Since(start); !isTooLargeRV(err) || took < 2900*time.Millisecond || took > 6*time.Second {
		t.Fatalf("a list at a future resourceVersion: %v after %v, want 504 Too large resource version after 3 s", err, took)
	}

	// 20 waiting lists (more than the 5 read slots) leave the slots to
	// the others; a 21st wait is refused.
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = list(future)
		}()
	}
	time.Sleep(time.Second)
	for i := range 10 {
		if _, err := services.List(c, metav1.ListOptions{}); err != nil {
			t.Fatalf("read %d with 20 lists waiting for a future resourceVersion: %v", i, err)
		}
	}
	if err := list(future); !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "waiting for a resourceVersion") {
		t.Errorf("a 21st wait: %v, want 429", err)
	}
	wg.Wait()
	for i, err := range errs {
		if !isTooLargeRV(err) {
			t.Errorf("waiting list %d: %v, want 504 Too large resource version", i, err)
		}
	}

	// A resourceVersion that arrives during the wait is served.
	next := strconv.FormatInt(rev+1, 10)
	go func() {
		time.Sleep(500 * time.Millisecond)
		h.Client.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "arrives"}}, metav1.CreateOptions{})
	}()
	got, err := h.Client.CoreV1().ConfigMaps("default").List(c, metav1.ListOptions{ResourceVersion: next})
	if err != nil || !slices.ContainsFunc(got.Items, func(cm corev1.ConfigMap) bool { return cm.Name == "arrives" }) {
		t.Errorf("a list at the next resourceVersion, written 0.5 s later: %v %v", err, got)
	}
}

// A watch at a resourceVersion the hub has not reached starts at once and
// sends nothing up to that version (kube-apiserver's watch cache); a
// streaming list (sendInitialEvents) waits 3 s at most, then 504.
func TestWatchAtAFutureResourceVersion(t *testing.T) {
	h := hubtest.Start(t)
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cms := h.Client.CoreV1().ConfigMaps("default")
	cur, err := cms.List(c, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := strconv.ParseInt(cur.ResourceVersion, 10, 64)
	start := time.Now()
	w, err := cms.Watch(c, metav1.ListOptions{ResourceVersion: strconv.FormatInt(rev+2, 10)})
	if err != nil || time.Since(start) > 2*time.Second {
		t.Fatalf("a watch two versions ahead: %v after %v, want it at once", err, time.Since(start))
	}
	defer w.Stop()
	for i := range 3 {
		if _, err := cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != "cm-2" {
			t.Errorf("first event: %s %v, want ADDED cm-2 (the first two are at or before the watch's resourceVersion)", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}

	start = time.Now()
	_, err = h.Client.CoreV1().RESTClient().Get().Namespace("default").Resource("configmaps").
		Param("watch", "true").Param("resourceVersion", strconv.FormatInt(rev+1000, 10)).Param("sendInitialEvents", "true").
		Param("allowWatchBookmarks", "true").Param("resourceVersionMatch", "NotOlderThan").MaxRetries(0).Watch(c)
	if took := time.Since(start); !isTooLargeRV(err) || took > 6*time.Second {
		t.Errorf("a streaming list at a future resourceVersion: %v after %v, want 504 Too large resource version after 3 s", err, took)
	}
}
