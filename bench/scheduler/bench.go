package schedulerbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/record"

	"flotilla.dev/flotilla/hub/scheduler"
	"flotilla.dev/flotilla/hub/scheduler/schedulertest"
)

// Fleet shape: devices of 4 cpu / 16 GiB / 110 pods in 10 zones; pods of
// 100m / 128 MiB in workloads of 100 replicas (so spreading is scored).
const (
	zones        = 10
	workloadSize = 100
)

// Nodes returns n Ready simulated devices.
func Nodes(n int) []*corev1.Node {
	out := make([]*corev1.Node, n)
	for i := range out {
		name := fmt.Sprintf("device-%05d", i)
		out[i] = &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				corev1.LabelHostname:      name,
				corev1.LabelTopologyZone:  fmt.Sprintf("site-%d", i%zones),
				corev1.LabelOSStable:      "linux",
				corev1.LabelArchStable:    "arm64",
				"node.flotilla.dev/shelf": "front",
			}},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{
					corev1.ResourceCPU:              resource.MustParse("4"),
					corev1.ResourceMemory:           resource.MustParse("16Gi"),
					corev1.ResourceEphemeralStorage: resource.MustParse("50Gi"),
					corev1.ResourcePods:             resource.MustParse("110"),
				},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			},
		}
	}
	return out
}

// Pods returns n pending pods in workloads of 100 replicas.
func Pods(n int) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	yes := true
	for i := range out {
		rs := fmt.Sprintf("app-%d", i/workloadSize)
		out[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "default", Name: fmt.Sprintf("%s-%05d", rs, i),
				UID:    types.UID(fmt.Sprintf("pod-uid-%d", i)),
				Labels: map[string]string{"app": rs},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet",
					Name: rs, UID: types.UID("rs-uid-" + rs), Controller: &yes}},
			},
			Spec: corev1.PodSpec{
				SchedulerName: corev1.DefaultSchedulerName,
				Tolerations: []corev1.Toleration{
					{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(300)},
					{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(300)},
				},
				Containers: []corev1.Container{{
					Name: "app", Image: "registry.local/app@sha256:0000",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("100m"),
						corev1.ResourceMemory: resource.MustParse("128Mi"),
					}},
				}},
			},
		}
	}
	return out
}

func ptr(v int64) *int64 { return &v }

// RunAlgorithm places pods on a Cache of nodes simulated devices and
// returns placements per second (filter, score and assume; no API).
func RunAlgorithm(ctx context.Context, nodes, pods int) (float64, error) {
	if nodes <= 0 || pods <= 0 {
		return 0, fmt.Errorf("scheduler bench: need nodes > 0 and pods > 0, got %d and %d", nodes, pods)
	}
	c := scheduler.NewCache(scheduler.CacheConfig{})
	for _, n := range Nodes(nodes) {
		c.SetNode(n)
	}
	ps := Pods(pods)
	start := time.Now()
	for i, p := range ps {
		if i%1000 == 0 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if _, err := c.Schedule(p); err != nil {
			return 0, fmt.Errorf("scheduler bench: placing pod %d of %d: %w", i, pods, err)
		}
	}
	return float64(pods) / time.Since(start).Seconds(), nil
}

// fakeWatchMu guards watch.DefaultChanSize, which Run raises while the
// fake clientset's watches open: client-go's fake watcher panics when its
// 100-event buffer is full, which a burst of bindings would do.
var fakeWatchMu sync.Mutex

// Run schedules pods pending pods onto nodes simulated devices through
// informers and pods/binding on a fake clientset, and returns pods bound
// per second, counted from the first binding to the last.
func Run(ctx context.Context, nodes, pods int) (float64, error) {
	if nodes <= 0 || pods <= 0 {
		return 0, fmt.Errorf("scheduler bench: need nodes > 0 and pods > 0, got %d and %d", nodes, pods)
	}
	objs := make([]runtime.Object, 0, nodes+pods)
	for _, n := range Nodes(nodes) {
		objs = append(objs, n)
	}
	for _, p := range Pods(pods) {
		objs = append(objs, p)
	}

	fakeWatchMu.Lock()
	saved := watch.DefaultChanSize
	watch.DefaultChanSize = int32(pods + nodes + 100)
	client, binder := schedulertest.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	// The informers open their watches when started, in Run below; the
	// buffer size is read then.
	var (
		mu          sync.Mutex
		first, last time.Time
		allBound    = make(chan struct{})
		count       int
	)
	binder.OnBind = func(_, _, _ string) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if count == 0 {
			first = now
		}
		last = now
		count++
		if count == pods {
			close(allBound)
		}
	}
	s, err := scheduler.New(client, factory, scheduler.Config{Recorder: &record.FakeRecorder{}})
	if err != nil {
		fakeWatchMu.Unlock()
		return 0, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	// Keep the larger buffer until the watches exist.
	for !factory.Core().V1().Pods().Informer().HasSynced() || !factory.Core().V1().Nodes().Informer().HasSynced() {
		select {
		case <-ctx.Done():
			watch.DefaultChanSize = saved
			fakeWatchMu.Unlock()
			return 0, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	watch.DefaultChanSize = saved
	fakeWatchMu.Unlock()

	select {
	case <-allBound:
	case <-ctx.Done():
		return 0, fmt.Errorf("scheduler bench: %d of %d pods bound: %w", binder.Bound(), pods, ctx.Err())
	}
	cancel()
	if err := <-done; err != nil {
		return 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	elapsed := last.Sub(first)
	if elapsed <= 0 {
		return 0, fmt.Errorf("scheduler bench: %d pods bound too fast to time", pods)
	}
	return float64(pods-1) / elapsed.Seconds(), nil
}
