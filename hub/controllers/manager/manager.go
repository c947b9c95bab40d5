package manager

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/hub/controllers/cronjob"
	"flotilla.dev/flotilla/hub/controllers/daemonset"
	"flotilla.dev/flotilla/hub/controllers/deployment"
	"flotilla.dev/flotilla/hub/controllers/endpointslice"
	"flotilla.dev/flotilla/hub/controllers/garbagecollector"
	"flotilla.dev/flotilla/hub/controllers/job"
	"flotilla.dev/flotilla/hub/controllers/nodelifecycle"
	"flotilla.dev/flotilla/hub/controllers/replicaset"
	"flotilla.dev/flotilla/hub/controllers/rollout"
	"flotilla.dev/flotilla/hub/scheduler"
	"flotilla.dev/flotilla/internal/controlloop"
	"flotilla.dev/flotilla/internal/run"
)

// Loop names, for Options.Disable.
const (
	Deployment       = deployment.Name
	ReplicaSet       = replicaset.Name
	DaemonSet        = daemonset.Name
	Job              = job.Name
	CronJob          = cronjob.Name
	EndpointSlice    = endpointslice.Name
	GarbageCollector = garbagecollector.Name
	Rollout          = rollout.Name
	NodeLifecycle    = "nodelifecycle"
	Scheduler        = "scheduler"
)

// LeaseName is the Lease the manager holds while it runs the loops.
const LeaseName = "flotilla-controller-manager"

// Options tune the manager; the zero value runs every loop with
// Kubernetes' worker counts and no leader election.
type Options struct {
	// Workers per loop by name; missing loops take Kubernetes' defaults
	// (deployment 5, replicaset 5, daemonset 2, job 5, cronjob 5,
	// endpointslice 5, garbagecollector 20; rollout 2).
	Workers map[string]int
	// Disable lists loops not to run (by the names above).
	Disable []string
	// LeaderElection guards the whole manager; LeaseName defaults to
	// LeaseName.
	LeaderElection controllerutil.LeaderElection
	// NodeLifecycle and Scheduler configure those loops.
	NodeLifecycle nodelifecycle.Config
	Scheduler     scheduler.Config
	// QPS and Burst of the loops' client; 0 means 1000 and 2000. The API
	// is the hub's own, which bounds its work itself; a lower client-side
	// limit was what a DaemonSet for 1,000 devices waited on (its pods,
	// their bindings and their Events share one bucket).
	QPS   float32
	Burst int
	// Logger; default slog.Default().
	Logger *slog.Logger
}

var defaultWorkers = map[string]int{
	Deployment: 5, ReplicaSet: 5, DaemonSet: 2, Job: 5, CronJob: 5, EndpointSlice: 5, GarbageCollector: 20, Rollout: 2,
}

// Run runs every enabled loop against the API at cfg until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	cfg = rest.CopyConfig(cfg)
	if opts.QPS == 0 {
		opts.QPS, opts.Burst = 1000, 2000
	}
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	if cfg.UserAgent == "" {
		cfg.UserAgent = "flotilla-controller-manager"
	}
	// Kubernetes' kinds in protobuf, as kube-controller-manager asks for
	// them: the loops' informers decode every pod event of the fleet, and
	// protobuf costs a fraction of JSON to decode. Flotilla's own kinds
	// have no protobuf encoding; the dynamic client reads them in JSON.
	typed := rest.CopyConfig(cfg)
	typed.ContentType = "application/vnd.kubernetes.protobuf"
	typed.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(typed)
	if err != nil {
		return fmt.Errorf("controller manager client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("controller manager metadata client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("controller manager dynamic client: %w", err)
	}
	le := opts.LeaderElection
	if le.LeaseName == "" {
		le.LeaseName = LeaseName
	}
	return controllerutil.RunCandidate(ctx, client, le, func(ctx context.Context) error {
		return RunWithClients(ctx, client, meta, dyn, opts)
	})
}

// RunWithClients runs the loops with given clients (tests pass fakes); the
// dynamic client serves Flotilla's own kinds (RolloutPolicies).
func RunWithClients(ctx context.Context, client kubernetes.Interface, meta metadata.Interface, dyn dynamic.Interface, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger.With("component", "controller-manager")
	// Informers never resync: every loop is level-triggered on real
	// changes, and a periodic full pass would only cost CPU.
	env := loopEnv{
		client: client, meta: meta, dyn: dyn, opts: opts,
		factory:     informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(dropManagedFields)),
		metaFactory: metadatainformer.NewSharedInformerFactoryWithOptions(meta, 0, metadatainformer.WithTransform(dropManagedFields)),
		dynFactory:  dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0),
	}
	if !slices.Contains(opts.Disable, Rollout) {
		// The DaemonSet loop stages templates by the policies the
		// rollout loop advances; without that loop nothing would ever
		// advance, so neither reads them.
		policies, err := rollout.NewPolicies(env.dynFactory)
		if err != nil {
			return err
		}
		env.policies = policies
	}

	var loops []run.Loop
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	for _, spec := range loopSpecs {
		if slices.Contains(opts.Disable, spec.name) {
			continue
		}
		env.recorder, env.workers = nil, defaultWorkers[spec.name]
		if n, ok := opts.Workers[spec.name]; ok && n > 0 {
			env.workers = n
		}
		if spec.recorder != "" {
			r, stop := controlloop.NewRecorder(ctx, client, spec.recorder)
			stops = append(stops, stop)
			env.recorder = r
		}
		loop, err := spec.build(env)
		if err != nil {
			return err
		}
		loops = append(loops, run.Loop{Name: spec.name, Run: loop})
	}

	// Every informer is registered: start them once for all loops.
	env.factory.Start(ctx.Done())
	env.metaFactory.Start(ctx.Done())
	env.dynFactory.Start(ctx.Done())
	defer env.factory.Shutdown()
	defer env.metaFactory.Shutdown()
	defer env.dynFactory.Shutdown()

	log.Info("controller manager started", "loops", len(loops))
	// One loop down means the manager is not whole: stop and let the
	// caller restart.
	return run.Group{Loops: loops}.Run(ctx)
}

// dropManagedFields empties an object's managedFields before an informer
// stores it. No loop reads them, and they are a third of a Node's or a
// Lease's decoded size: at 10,000 devices, tens of megabytes the hub would
// otherwise keep twice (once in its watch cache, once here). An update
// built from an informer's copy sends no managedFields, and the API keeps
// the stored ones, as kube-apiserver does.
func dropManagedFields(o any) (any, error) {
	if m, err := meta.Accessor(o); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return o, nil
}

// loopEnv is what a loop is built from: the shared clients and
// informers, and its own recorder and worker count.
type loopEnv struct {
	client      kubernetes.Interface
	meta        metadata.Interface
	factory     informers.SharedInformerFactory
	metaFactory metadatainformer.SharedInformerFactory
	dyn         dynamic.Interface
	dynFactory  dynamicinformer.DynamicSharedInformerFactory
	// policies are the RolloutPolicies (nil with the rollout loop off).
	policies *rollout.Policies
	opts     Options
	// recorder records the loop's events (nil for loops with no
	// recorder); workers is its worker count.
	recorder record.EventRecorder
	workers  int
}

// loopSpec is one of the manager's loops: its name, the component its
// events are recorded as ("" for none) and how it is built.
type loopSpec struct {
	name     string
	recorder string
	build    func(env loopEnv) (func(context.Context) error, error)
}

// loopSpecs are the manager's loops, built and registered with the
// informers in this order.
var loopSpecs = []loopSpec{
	{ReplicaSet, "replicaset-controller", func(env loopEnv) (func(context.Context) error, error) {
		c, err := replicaset.New(env.client, env.factory, env.recorder, replicaset.Options{Logger: env.opts.Logger})
		return withWorkers(c, err, env.workers)
	}},
	{Deployment, "deployment-controller", func(env loopEnv) (func(context.Context) error, error) {
		opts := deployment.Options{Logger: env.opts.Logger}
		if env.policies != nil {
			opts.Rollouts = rollout.NewDeploymentGate(env.policies, env.factory)
		}
		c, err := deployment.New(env.client, env.factory, env.recorder, opts)
		return withWorkers(c, err, env.workers)
	}},
	{DaemonSet, "daemonset-controller", func(env loopEnv) (func(context.Context) error, error) {
		opts := daemonset.Options{Logger: env.opts.Logger}
		if env.policies != nil {
			opts.Rollouts = &rollout.Gate{Policies: env.policies}
		}
		c, err := daemonset.New(env.client, env.factory, env.recorder, opts)
		return withWorkers(c, err, env.workers)
	}},
	{Rollout, "rollout-controller", func(env loopEnv) (func(context.Context) error, error) {
		c, err := rollout.New(env.dyn, env.policies, env.factory, env.recorder, rollout.Options{Logger: env.opts.Logger})
		return withWorkers(c, err, env.workers)
	}},
	{Job, "job-controller", func(env loopEnv) (func(context.Context) error, error) {
		c, err := job.New(env.client, env.factory, env.recorder, job.Options{Logger: env.opts.Logger})
		return withWorkers(c, err, env.workers)
	}},
	{CronJob, "cronjob-controller", func(env loopEnv) (func(context.Context) error, error) {
		c, err := cronjob.New(env.client, env.factory, env.recorder, cronjob.Options{Logger: env.opts.Logger})
		return withWorkers(c, err, env.workers)
	}},
	{EndpointSlice, "endpointslice-controller", func(env loopEnv) (func(context.Context) error, error) {
		c, err := endpointslice.New(env.client, env.factory, env.recorder, endpointslice.Options{Logger: env.opts.Logger})
		return withWorkers(c, err, env.workers)
	}},
	{GarbageCollector, "", func(env loopEnv) (func(context.Context) error, error) {
		c, err := garbagecollector.New(env.meta, env.metaFactory, garbagecollector.Options{Logger: env.opts.Logger})
		return withWorkers(c, err, env.workers)
	}},
	{NodeLifecycle, "", func(env loopEnv) (func(context.Context) error, error) {
		cfg := env.opts.NodeLifecycle
		if cfg.Logger == nil {
			cfg.Logger = env.opts.Logger
		}
		c, err := nodelifecycle.New(env.client, env.factory, cfg)
		if err != nil {
			return nil, fmt.Errorf("node lifecycle: %w", err)
		}
		return c.Run, nil
	}},
	{Scheduler, "", func(env loopEnv) (func(context.Context) error, error) {
		cfg := env.opts.Scheduler
		if cfg.Logger == nil {
			cfg.Logger = env.opts.Logger
		}
		if env.policies != nil && cfg.Placement == nil {
			cfg.Placement = rollout.NewDeploymentGate(env.policies, env.factory)
		}
		s, err := scheduler.New(env.client, env.factory, cfg)
		if err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
		return s.Run, nil
	}},
}

// withWorkers is the loop of a controller that runs with workers.
func withWorkers[C interface {
	Run(ctx context.Context, workers int) error
}](c C, err error, workers int) (func(context.Context) error, error) {
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return c.Run(ctx, workers) }, nil
}
