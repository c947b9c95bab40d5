package rollout_test

import (
	"context"
	"testing"

	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/bench/rollout"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/controllers/manager"
	"flotilla.dev/flotilla/hub/hubtest"
)

// BenchmarkRollingUpdate100 reports the time to roll a 100-replica
// Deployment to a new image on simulated devices, against a real hub
// (go test -bench RollingUpdate -benchtime 3x ./bench/rollout/).
func BenchmarkRollingUpdate100(b *testing.B) {
	h := hubtest.Start(b, hubtest.Options{Loops: []hub.Loop{{Name: "controllers",
		Run: func(ctx context.Context, cfg *rest.Config) error { return manager.Run(ctx, cfg, manager.Options{}) }}}})
	var total float64
	for b.Loop() {
		d, err := rollout.Run(context.Background(), h.Config, 100)
		if err != nil {
			b.Fatal(err)
		}
		total += d.Seconds()
	}
	b.ReportMetric(total/float64(b.N), "s/rollout")
}

func TestRunRefusesZeroReplicas(t *testing.T) {
	if _, err := rollout.Run(context.Background(), &rest.Config{Host: "https://127.0.0.1:1"}, 0); err == nil {
		t.Fatal("Run accepted 0 replicas")
	}
}
