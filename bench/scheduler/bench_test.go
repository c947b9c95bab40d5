package schedulerbench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/controllers/manager"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/hub/scheduler"
)

func TestRunBindsEveryPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rate, err := Run(ctx, 50, 500)
	if err != nil {
		t.Fatal(err)
	}
	if rate <= 0 {
		t.Fatalf("rate %v", rate)
	}
	if _, err := RunAlgorithm(ctx, 50, 500); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(ctx, 0, 1); err == nil {
		t.Fatal("Run with no nodes succeeded")
	}
}

// BenchmarkSchedule measures placement alone (filter, score, assume).
func BenchmarkSchedule(b *testing.B) {
	for _, nodes := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			ns := Nodes(nodes)
			// A fresh cache every 10,000 pods keeps the fleet far from full
			// (4 cpu / 100m = 40 pods per node) and the heap small.
			const capacity = 10000
			pods := Pods(capacity)
			newCache := func() *scheduler.Cache {
				c := scheduler.NewCache(scheduler.CacheConfig{})
				for _, n := range ns {
					c.SetNode(n)
				}
				return c
			}
			c := newCache()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%capacity == 0 && i > 0 {
					b.StopTimer()
					c = newCache()
					b.StartTimer()
				}
				if _, err := c.Schedule(pods[i%capacity]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEndToEnd reports pods/s through informers and pods/binding.
func BenchmarkEndToEnd(b *testing.B) {
	for _, nodes := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			var rate float64
			for range b.N {
				r, err := Run(context.Background(), nodes, 10000)
				if err != nil {
					b.Fatal(err)
				}
				rate = r
			}
			b.ReportMetric(rate, "pods/s")
		})
	}
}

func TestRunAPIBindsEveryPod(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Loops: []hub.Loop{{Name: "controllers", Run: func(ctx context.Context, cfg *rest.Config) error {
		return manager.Run(ctx, cfg, manager.Options{})
	}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := RunAPI(ctx, h.Config, "sched-bench", 120, 300)
	if err != nil {
		t.Fatal(err)
	}
	if r.Pods != 300 || r.PerSec <= 0 {
		t.Fatalf("result %+v", r)
	}
}
