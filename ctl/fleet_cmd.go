package ctl

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/ctl/fleet"
	"flotilla.dev/flotilla/ctl/term"
)

var gitSourceGVR = v1alpha1.SchemeGroupVersion.WithResource("gitsources")

func (a *App) fleetCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "fleet", Short: "Views of the whole fleet"}
	var watch bool
	var interval time.Duration
	var maxDevices, maxProblems int
	status := &cobra.Command{
		Use:   "status",
		Short: "One screen for the whole fleet: devices, pods, usage, sources, rollouts and the problems worth a look",
		Long: fmt.Sprintf(`One screen for the whole fleet: devices, pods, usage, sources, rollouts and
the problems worth a look.

Each device's CPU and memory are its last reported usage (the metrics API
kubectl top reads) as shares of its capacity, DISK the fullest of its data
dir's and containerd's filesystems; "-" when the device reports none (it is
offline, its metrics are off, or it has not reported yet). A device is
listed as running low at CPU or memory of %d%% and more, or a filesystem
with less than %d%% free.`, fleet.LowCPUPercent, fleet.LowDiskFreePercent),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := fleet.Options{Style: term.For(a.Out, a.Getenv), MaxDevices: maxDevices, MaxProblems: maxProblems}
			if watch {
				return a.fleetWatch(cmd.Context(), opts, interval)
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			snap, err := listSnapshot(cmd.Context(), c)
			if err != nil {
				return err
			}
			snap.Now = a.now()
			return fleet.Render(a.Out, fleet.Summarize(snap), opts)
		},
	}
	status.Flags().BoolVarP(&watch, "watch", "w", false, "keep the screen up to date as the fleet changes")
	status.Flags().DurationVar(&interval, "interval", time.Second, "with --watch, redraw at most this often")
	status.Flags().IntVar(&maxDevices, "max-devices", 50, "list at most this many devices, the least ready first (0: all)")
	status.Flags().IntVar(&maxProblems, "max-problems", 20, "list at most this many problems, the worst first (0: all)")
	cmd.AddCommand(status)
	return cmd
}

// listSnapshot reads the fleet once.
func listSnapshot(ctx context.Context, c *Clients) (*fleet.Snapshot, error) {
	s := &fleet.Snapshot{}
	all := metav1.ListOptions{}
	cs := c.Typed
	nodes, err := cs.CoreV1().Nodes().List(ctx, all)
	if err != nil {
		return nil, err
	}
	s.Nodes = nodes.Items
	leases, err := cs.CoordinationV1().Leases(api.NamespaceNodeLease).List(ctx, all)
	if err != nil {
		return nil, err
	}
	s.Leases = leases.Items
	pods, err := cs.CoreV1().Pods("").List(ctx, all)
	if err != nil {
		return nil, err
	}
	s.Pods = pods.Items
	events, err := cs.CoreV1().Events("").List(ctx, all)
	if err != nil {
		return nil, err
	}
	s.Events = events.Items
	services, err := cs.CoreV1().Services("").List(ctx, all)
	if err != nil {
		return nil, err
	}
	s.Services = services.Items
	slices, err := cs.DiscoveryV1().EndpointSlices("").List(ctx, all)
	if err != nil {
		return nil, err
	}
	s.EndpointSlices = slices.Items
	deploys, err := cs.AppsV1().Deployments("").List(ctx, all)
	if err != nil {
		return nil, err
	}
	s.Deployments = deploys.Items
	dss, err := cs.AppsV1().DaemonSets("").List(ctx, all)
	if err != nil {
		return nil, err
	}
	s.DaemonSets = dss.Items
	u, err := c.Dynamic.Resource(gitSourceGVR).Namespace("").List(ctx, all)
	if err != nil {
		return nil, err
	}
	var gl v1alpha1.GitSourceList
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &gl); err != nil {
		return nil, fmt.Errorf("decoding gitsources: %w", err)
	}
	s.GitSources = gl.Items
	s.NodeMetrics = listNodeMetrics(ctx, c)
	return s, nil
}

var nodeMetricsGVR = metricsv1beta1.SchemeGroupVersion.WithResource("nodes")

// listNodeMetrics reads the devices' last usage; none when the hub
// serves none or the user may not read them (the screen then shows "-").
func listNodeMetrics(ctx context.Context, c *Clients) []metricsv1beta1.NodeMetrics {
	u, err := c.Dynamic.Resource(nodeMetricsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var l metricsv1beta1.NodeMetricsList
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &l); err != nil {
		return nil
	}
	return l.Items
}

// metricsRefresh is how often the watching screen reads the usage again:
// it cannot be watched, and devices report once a minute by default.
const metricsRefresh = 15 * time.Second

// fleetWatch keeps informers on every kind the screen reads and redraws
// when something changed, at most once an interval.
func (a *App) fleetWatch(ctx context.Context, opts fleet.Options, interval time.Duration) error {
	c, err := a.connect()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := informers.NewSharedInformerFactory(c.Typed, 0)
	df := dynamicinformer.NewDynamicSharedInformerFactory(c.Dynamic, 0)
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
	nodes, leases, pods := f.Core().V1().Nodes(), f.Coordination().V1().Leases(), f.Core().V1().Pods()
	events, services, slices := f.Core().V1().Events(), f.Core().V1().Services(), f.Discovery().V1().EndpointSlices()
	deploys, dss := f.Apps().V1().Deployments(), f.Apps().V1().DaemonSets()
	sources := df.ForResource(gitSourceGVR)
	for _, inf := range []cache.SharedIndexInformer{nodes.Informer(), leases.Informer(), pods.Informer(), events.Informer(),
		services.Informer(), slices.Informer(), deploys.Informer(), dss.Informer(), sources.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	f.Start(ctx.Done())
	df.Start(ctx.Done())
	fmt.Fprintln(a.Err, "Reading the fleet…")
	for _, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return ctx.Err()
		}
	}
	for _, ok := range df.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return ctx.Err()
		}
	}
	var usage []metricsv1beta1.NodeMetrics
	var usageAt time.Time
	snapshot := func() (*fleet.Snapshot, error) {
		s := &fleet.Snapshot{}
		s.Now = a.now()
		if s.Now.Sub(usageAt) >= metricsRefresh {
			usage, usageAt = listNodeMetrics(ctx, c), s.Now
		}
		s.NodeMetrics = usage
		everything := labels.Everything()
		s.Nodes = values(nodes.Lister().List(everything))
		s.Leases = values(leases.Lister().Leases(api.NamespaceNodeLease).List(everything))
		s.Pods = values(pods.Lister().List(everything))
		s.Events = values(events.Lister().List(everything))
		s.Services = values(services.Lister().List(everything))
		s.EndpointSlices = values(slices.Lister().List(everything))
		s.Deployments = values(deploys.Lister().List(everything))
		s.DaemonSets = values(dss.Lister().List(everything))
		objs, err := sources.Lister().List(everything)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			var g v1alpha1.GitSource
			if u, ok := o.(*unstructured.Unstructured); ok {
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &g); err != nil {
					return nil, fmt.Errorf("decoding gitsource %s: %w", u.GetName(), err)
				}
				s.GitSources = append(s.GitSources, g)
			}
		}
		return s, nil
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	dirty := true
	for {
		if dirty {
			s, err := snapshot()
			if err != nil {
				return err
			}
			fmt.Fprint(a.Out, opts.Style.ClearScreen())
			fmt.Fprintf(a.Out, "%s  (watching; Ctrl-C to stop)\n\n", s.Now.Format("15:04:05"))
			if err := fleet.Render(a.Out, fleet.Summarize(s), opts); err != nil {
				return err
			}
			dirty = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			// Redraw at the next tick, so a burst of changes is one frame.
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			dirty = true
		case <-tick.C:
			// Ages move on even when nothing changes.
			dirty = true
		}
	}
}

// values dereferences a lister's answer; listers read from memory and
// their error is always nil.
func values[T any](ps []*T, _ ...error) []T {
	out := make([]T, 0, len(ps))
	for _, p := range ps {
		out = append(out, *p)
	}
	return out
}
