package fleetsim

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/hub/hubtest"
)

// TestWatchersServedCountsTheHubsWatches: the restart figure's count of
// the watches a hub serves, read from its metrics, follows the watches
// opened and closed (it reads the metric by its exact name).
func TestWatchersServedCountsTheHubsWatches(t *testing.T) {
	h := hubtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before, err := watchersServed(ctx, h.Client)
	if err != nil {
		t.Fatal(err)
	}
	var stops []func()
	for range 3 {
		w, err := h.Client.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, w.Stop)
	}
	wait := func(want int) {
		t.Helper()
		var got int
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if got, err = watchersServed(ctx, h.Client); err == nil && got == want {
				return
			}
		}
		t.Fatalf("the hub serves %d watches by its metrics (%v), want %d", got, err, want)
	}
	wait(before + 3)
	for _, stop := range stops {
		stop()
	}
	wait(before)
}
