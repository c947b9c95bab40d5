package kubelet

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// BenchmarkPodStartToReady measures a pod created on the hub until a
// watcher sees it Ready, with the image already present; it reports the
// p50 and p99 over b.N pods (run with -benchtime=50x).
func BenchmarkPodStartToReady(b *testing.B) {
	a := newAgent(b)
	a.create(a.pod("warm", nil))
	a.wait("warm", "Ready", ready)
	var ds []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("bench-%d", i)
		w, err := a.hub.Client.CoreV1().Pods("default").Watch(context.Background(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		a.create(a.pod(name, nil))
		if err := waitReady(w, 60*time.Second); err != nil {
			b.Fatalf("pod %s: %v", name, err)
		}
		ds = append(ds, time.Since(start))
		w.Stop()
	}
	b.StopTimer()
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(ds[(len(ds)*99)/100].Milliseconds()), "p99-ms")
}

func waitReady(w watch.Interface, timeout time.Duration) error {
	t := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch closed")
			}
			if p, ok := ev.Object.(*corev1.Pod); ok && ready(p) == nil {
				return nil
			}
		case <-t:
			return fmt.Errorf("not Ready within %s", timeout)
		}
	}
}
