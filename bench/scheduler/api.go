package schedulerbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// APIResult is what a user waits for: pods created through the hub's
// HTTPS API until a watcher sees every one bound.
type APIResult struct {
	Nodes, Pods int
	// Elapsed runs from the first create to the last binding seen.
	Elapsed time.Duration
	PerSec  float64
	// CreatesDone is when the last create was answered, from the start.
	CreatesDone time.Duration
}

// apiClients is how many creators run at once, a GitOps applier's or a
// few controllers' worth.
const apiClients = 32

// RunAPI registers nodes Node objects (with their Leases, so the node
// lifecycle loop keeps them Ready; no kubelet runs) on the hub at cfg,
// whose controllers and scheduler must be running, then creates pods pods
// in namespace ns from apiClients clients and returns how fast a watcher
// sees them bound. A third of the workloads (100 replicas each) have
// required pod anti-affinity per device, a third a DoNotSchedule spread
// over zones (maxSkew 1), the rest neither.
func RunAPI(ctx context.Context, cfg *rest.Config, ns string, nodes, pods int) (APIResult, error) {
	if nodes <= 0 || pods <= 0 {
		return APIResult{}, fmt.Errorf("scheduler bench: need nodes > 0 and pods > 0, got %d and %d", nodes, pods)
	}
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return APIResult{}, err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return APIResult{}, fmt.Errorf("scheduler bench: namespace %s: %w", ns, err)
	}
	ns0 := Nodes(nodes)
	if err := parallel(ctx, nodes, func(ctx context.Context, i int) error {
		n := ns0[i].DeepCopy()
		n.Name = ns + "-" + n.Name
		n.Labels[corev1.LabelHostname] = n.Name
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		now := metav1.NewMicroTime(time.Now())
		_, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &n.Name, LeaseDurationSeconds: ptr32(40), RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return APIResult{}, fmt.Errorf("scheduler bench: registering nodes: %w", err)
	}
	// Let the scheduler's informer see every node before timing starts.
	time.Sleep(2 * time.Second)

	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return APIResult{}, err
	}
	defer w.Stop()
	boundAll := make(chan time.Time, 1)
	go func() {
		seen := map[string]bool{}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || p.Spec.NodeName == "" || seen[p.Name] {
				continue
			}
			seen[p.Name] = true
			if len(seen) == pods {
				boundAll <- time.Now()
				return
			}
		}
	}()

	tmpl := apiPods(pods)
	start := time.Now()
	if err := parallel(ctx, pods, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, tmpl[i], metav1.CreateOptions{})
		return err
	}); err != nil {
		return APIResult{}, fmt.Errorf("scheduler bench: creating pods: %w", err)
	}
	created := time.Since(start)
	select {
	case end := <-boundAll:
		el := end.Sub(start)
		return APIResult{Nodes: nodes, Pods: pods, Elapsed: el, PerSec: float64(pods) / el.Seconds(), CreatesDone: created}, nil
	case <-ctx.Done():
		return APIResult{}, ctx.Err()
	case <-time.After(5 * time.Minute):
		return APIResult{}, fmt.Errorf("scheduler bench: not every pod was bound within 5 minutes")
	}
}

// apiPods are Pods without UIDs or owners (the API gives the UIDs), in
// workloads of 100 with the rules RunAPI describes.
func apiPods(n int) []*corev1.Pod {
	out := Pods(n)
	for i, p := range out {
		p.UID, p.OwnerReferences, p.Namespace = "", nil, ""
		w := i / workloadSize
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": p.Labels["app"]}}
		switch w % 3 {
		case 0:
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel, TopologyKey: corev1.LabelHostname}}}}
		case 1:
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
				WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel}}
		}
		// The hub's digest policy wants a full sha256.
		p.Spec.Containers[0].Image = "registry.local/app@sha256:" + fmt.Sprintf("%064d", 0)
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("10m")
	}
	return out
}

func ptr32(v int32) *int32 { return &v }

// parallel runs f for 0..n-1 from apiClients goroutines, stopping at the
// first error.
func parallel(ctx context.Context, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		next     int
		firstErr error
		wg       sync.WaitGroup
	)
	for range apiClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}
