package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/hub/controllers/daemonset"
	"flotilla.dev/flotilla/hub/controllers/deployment"
	"flotilla.dev/flotilla/hub/controllers/endpointslice"
	"flotilla.dev/flotilla/hub/controllers/garbagecollector"
	"flotilla.dev/flotilla/hub/controllers/nodelifecycle"
	"flotilla.dev/flotilla/hub/controllers/replicaset"
	"flotilla.dev/flotilla/hub/scheduler"
)

// Loop names, for Options.Disable.
const (
	Deployment       = deployment.Name
	ReplicaSet       = replicaset.Name
	DaemonSet        = daemonset.Name
	EndpointSlice    = endpointslice.Name
	GarbageCollector = garbagecollector.Name
	NodeLifecycle    = "nodelifecycle"
	Scheduler        = "scheduler"
)

// LeaseName is the Lease the manager holds while it runs the loops.
const LeaseName = "flotilla-controller-manager"

// Options tune the manager; the zero value runs every loop with
// Kubernetes' worker counts and no leader election.
type Options struct {
	// Workers per loop by name; missing loops take Kubernetes' defaults
	// (deployment 5, replicaset 5, daemonset 2, endpointslice 5,
	// garbagecollector 20).
	Workers map[string]int
	// Disable lists loops not to run (by the names above).
	Disable []string
	// LeaderElection guards the whole manager; LeaseName defaults to
	// LeaseName.
	LeaderElection controllerutil.LeaderElection
	// NodeLifecycle and Scheduler configure those loops.
	NodeLifecycle nodelifecycle.Config
	Scheduler     scheduler.Config
	// QPS and Burst of the loops' client; 0 means 200 and 400 (the API is
	// the hub's own, usually on the same machine).
	QPS   float32
	Burst int
	// Logger; default slog.Default().
	Logger *slog.Logger
}

var defaultWorkers = map[string]int{
	Deployment: 5, ReplicaSet: 5, DaemonSet: 2, EndpointSlice: 5, GarbageCollector: 20,
}

// Run runs every enabled loop against the API at cfg until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	cfg = rest.CopyConfig(cfg)
	if opts.QPS == 0 {
		opts.QPS, opts.Burst = 200, 400
	}
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	if cfg.UserAgent == "" {
		cfg.UserAgent = "flotilla-controller-manager"
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("controller manager client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("controller manager metadata client: %w", err)
	}
	le := opts.LeaderElection
	if le.LeaseName == "" {
		le.LeaseName = LeaseName
	}
	return controllerutil.RunElected(ctx, client, le, func(ctx context.Context) error {
		return RunWithClients(ctx, client, meta, opts)
	})
}

// RunWithClients runs the loops with given clients (tests pass fakes).
func RunWithClients(ctx context.Context, client kubernetes.Interface, meta metadata.Interface, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger.With("component", "controller-manager")
	enabled := func(name string) bool { return !slices.Contains(opts.Disable, name) }
	workers := func(name string) int {
		if n, ok := opts.Workers[name]; ok && n > 0 {
			return n
		}
		return defaultWorkers[name]
	}
	// Informers never resync: every loop is level-triggered on real
	// changes, and a periodic full pass would only cost CPU.
	factory := informers.NewSharedInformerFactory(client, 0)
	metaFactory := metadatainformer.NewSharedInformerFactory(meta, 0)

	type loop struct {
		name string
		run  func(context.Context) error
	}
	var loops []loop
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	if enabled(ReplicaSet) {
		r, stop := controllerutil.NewRecorder(ctx, client, "replicaset-controller")
		stops = append(stops, stop)
		c, err := replicaset.New(client, factory, r, replicaset.Options{Logger: opts.Logger})
		if err != nil {
			return err
		}
		loops = append(loops, loop{ReplicaSet, func(ctx context.Context) error { return c.Run(ctx, workers(ReplicaSet)) }})
	}
	if enabled(Deployment) {
		r, stop := controllerutil.NewRecorder(ctx, client, "deployment-controller")
		stops = append(stops, stop)
		c, err := deployment.New(client, factory, r, deployment.Options{Logger: opts.Logger})
		if err != nil {
			return err
		}
		loops = append(loops, loop{Deployment, func(ctx context.Context) error { return c.Run(ctx, workers(Deployment)) }})
	}
	if enabled(DaemonSet) {
		r, stop := controllerutil.NewRecorder(ctx, client, "daemonset-controller")
		stops = append(stops, stop)
		c, err := daemonset.New(client, factory, r, daemonset.Options{Logger: opts.Logger})
		if err != nil {
			return err
		}
		loops = append(loops, loop{DaemonSet, func(ctx context.Context) error { return c.Run(ctx, workers(DaemonSet)) }})
	}
	if enabled(EndpointSlice) {
		r, stop := controllerutil.NewRecorder(ctx, client, "endpointslice-controller")
		stops = append(stops, stop)
		c, err := endpointslice.New(client, factory, r, endpointslice.Options{Logger: opts.Logger})
		if err != nil {
			return err
		}
		loops = append(loops, loop{EndpointSlice, func(ctx context.Context) error { return c.Run(ctx, workers(EndpointSlice)) }})
	}
	if enabled(GarbageCollector) {
		c, err := garbagecollector.New(meta, metaFactory, garbagecollector.Options{Logger: opts.Logger})
		if err != nil {
			return err
		}
		loops = append(loops, loop{GarbageCollector, func(ctx context.Context) error { return c.Run(ctx, workers(GarbageCollector)) }})
	}
	if enabled(NodeLifecycle) {
		cfg := opts.NodeLifecycle
		if cfg.Logger == nil {
			cfg.Logger = opts.Logger
		}
		c, err := nodelifecycle.New(client, factory, cfg)
		if err != nil {
			return fmt.Errorf("node lifecycle: %w", err)
		}
		loops = append(loops, loop{NodeLifecycle, c.Run})
	}
	if enabled(Scheduler) {
		cfg := opts.Scheduler
		if cfg.Logger == nil {
			cfg.Logger = opts.Logger
		}
		s, err := scheduler.New(client, factory, cfg)
		if err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
		loops = append(loops, loop{Scheduler, s.Run})
	}

	// Every informer is registered: start them once for all loops.
	factory.Start(ctx.Done())
	metaFactory.Start(ctx.Done())
	defer factory.Shutdown()
	defer metaFactory.Shutdown()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(loops))
	for _, l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.run(ctx); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("%s: %w", l.name, err)
				cancel() // one loop down means the manager is not whole: stop and let the caller restart
			}
		}()
	}
	log.Info("controller manager started", "loops", len(loops))
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
