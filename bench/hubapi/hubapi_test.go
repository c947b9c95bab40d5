package hubapi

import (
	"context"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/hub/hubtest"
)

// TestSmall runs both drivers at a small size against a real hub: every
// create lands, every watcher sees the write, and each figure is filled.
func TestSmall(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()

	cr, err := Creates(ctx, h.Config, "default", 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	if cr.Clients != 2 || cr.Creates != 10 || cr.PerSec <= 0 || cr.P50 <= 0 || cr.P99 < cr.P50 {
		t.Errorf("creates: %+v", cr)
	}
	cms, err := h.Client.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) < 10 {
		t.Errorf("%d ConfigMaps after 10 creates", len(cms.Items))
	}

	ar, err := ApplyVsUpdate(ctx, h.Config, "default", 5)
	if err != nil {
		t.Fatal(err)
	}
	if ar.Writes != 5 || ar.ApplyP50 <= 0 || ar.ApplyP99 < ar.ApplyP50 || ar.UpdateP50 <= 0 || ar.UpdateP99 < ar.UpdateP50 || ar.ManagedFieldsBytes == 0 {
		t.Errorf("apply vs update: %+v", ar)
	}

	// The hub runs in this process, so its RSS is ours.
	fr, err := Fanout(ctx, h.Config, "default", 3, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if fr.Watchers != 3 || fr.P50 <= 0 || fr.P99 < fr.P50 || fr.All < fr.P99 || fr.HubRSS <= 0 {
		t.Errorf("fanout: %+v", fr)
	}
}
