package rollout_test

import (
	"context"
	"fmt"
	"strings"
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

// TestStagedRunsEveryWave runs the staged benchmark on a small fleet: each
// wave is reported with its devices, in the policy's order.
func TestStagedRunsEveryWave(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub with simulated devices")
	}
	h := hubtest.Start(t, hubtest.Options{Loops: []hub.Loop{{Name: "controllers",
		Run: func(ctx context.Context, cfg *rest.Config) error { return manager.Run(ctx, cfg, manager.Options{}) }}}})
	r, err := rollout.Staged(context.Background(), h.Config, 30)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var devices int32
	for _, w := range r.Waves {
		got = append(got, fmt.Sprintf("%s:%d", w.Name, w.Devices))
		devices += w.Devices
	}
	// 1% of 30 is still one canary; 10% of the 29 others rounds up to 3.
	if strings.Join(got, ",") != "canary:1,ten-percent:3,rest:26" || devices != 30 || r.Total <= 0 {
		t.Fatalf("waves %v, total %v", got, r.Total)
	}
}

// TestStagedDeploymentRunsEveryWave is the same for a Deployment: its
// waves count the devices that run its replicas.
func TestStagedDeploymentRunsEveryWave(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub with simulated devices")
	}
	h := hubtest.Start(t, hubtest.Options{Loops: []hub.Loop{{Name: "controllers",
		Run: func(ctx context.Context, cfg *rest.Config) error { return manager.Run(ctx, cfg, manager.Options{}) }}}})
	r, err := rollout.StagedDeployment(context.Background(), h.Config, 30)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range r.Waves {
		got = append(got, w.Name)
	}
	if strings.Join(got, ",") != "canary,ten-percent,rest" || r.Total <= 0 || r.Kind != "Deployment" {
		t.Fatalf("waves %v (%+v), total %v", got, r.Waves, r.Total)
	}
	if !strings.Contains(r.Lines()[0], "staged Deployment, 30 replicas") {
		t.Errorf("figure %q", r.Lines()[0])
	}
}

func TestStagedRefusesTooFewDevices(t *testing.T) {
	if _, err := rollout.Staged(context.Background(), &rest.Config{Host: "https://127.0.0.1:1"}, 2); err == nil {
		t.Fatal("Staged accepted 2 devices")
	}
}
