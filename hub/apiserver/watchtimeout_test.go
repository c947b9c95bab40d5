package apiserver_test

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/hub/apiserver"
	"flotilla.dev/flotilla/hub/hubtest"
)

// A watch lasts what its client asks for up to MinWatchTimeout; asked for
// more, or nothing, it lasts a random time between MinWatchTimeout and
// twice it, so none lasts for ever and they do not all end together.
func TestWatchDurationIsCapped(t *testing.T) {
	const least = 2 * time.Second
	h := hubtest.Start(t, hubtest.Options{Limits: apiserver.Limits{MinWatchTimeout: least}})
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cms := h.Client.CoreV1().ConfigMaps("default")
	lasts := func(timeoutSeconds *int64) time.Duration {
		start := time.Now()
		w, err := cms.Watch(c, metav1.ListOptions{TimeoutSeconds: timeoutSeconds})
		if err != nil {
			t.Error(err)
			return 0
		}
		defer w.Stop()
		for range w.ResultChan() {
		}
		return time.Since(start)
	}
	one, hour := int64(1), int64(3600)
	if d := lasts(&one); d < time.Second || d > least {
		t.Errorf("timeoutSeconds=1: the watch lasted %v", d)
	}
	var mu sync.Mutex
	var ends []time.Duration
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := &hour
			if i%2 == 0 {
				ts = nil
			}
			d := lasts(ts)
			if d < least || d > 2*least+time.Second {
				t.Errorf("timeoutSeconds=%v: the watch lasted %v, want between %v and %v", ts, d, least, 2*least)
			}
			mu.Lock()
			ends = append(ends, d)
			mu.Unlock()
		}()
	}
	wg.Wait()
	spread := false
	for _, d := range ends {
		if d-ends[0] > 100*time.Millisecond || ends[0]-d > 100*time.Millisecond {
			spread = true
		}
	}
	if !spread {
		t.Errorf("6 watches all ended together: %v", ends)
	}
}
