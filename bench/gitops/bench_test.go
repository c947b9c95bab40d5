package gitopsbench

import (
	"context"
	"testing"

	"flotilla.dev/flotilla/hub/hubtest"
)

// TestRunSmall runs the driver on a small repository: every figure is
// measured and the objects are gone afterwards.
func TestRunSmall(t *testing.T) {
	h := hubtest.Start(t)
	res, err := Run(context.Background(), h.Config, Options{Manifests: 30, Polls: 3, SkipRSS: true, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.FirstApply <= 0 || res.NoOpPoll <= 0 || res.DriftCheck <= 0 || res.OneChange <= 0 {
		t.Fatalf("figures missing: %+v", res)
	}
	if len(res.Lines()) != 4 {
		t.Errorf("lines: %v", res.Lines())
	}
	cms, err := h.Client.CoreV1().ConfigMaps("default").List(context.Background(), metav1ListApp)
	if err != nil || len(cms.Items) != 0 {
		t.Errorf("left behind: %d, %v", len(cms.Items), err)
	}
}

// BenchmarkGitOps1000 prints every figure for a repository of 1,000
// manifests against a real hub (go test -run X -bench GitOps -benchtime 1x ./bench/gitops/).
func BenchmarkGitOps1000(b *testing.B) {
	h := hubtest.Start(b)
	for b.Loop() {
		res, err := Run(context.Background(), h.Config, Options{Manifests: 1000})
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range res.Lines() {
			b.Log(l)
		}
		b.ReportMetric(float64(res.NoOpPoll.Microseconds())/1000, "ms/noop-poll")
		b.ReportMetric(float64(res.OneChange.Milliseconds()), "ms/one-change")
	}
}
