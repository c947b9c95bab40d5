package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/gitops/applier"
	"flotilla.dev/flotilla/gitops/loader"
	"flotilla.dev/flotilla/gitops/source"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Finalizer is kept on a GitSource with spec.pruneOnDelete, so that its
// objects are deleted before it is.
const Finalizer = "flotilla.dev/prune-on-delete"

// Component names the loop in Events.
const Component = "gitops"

var gvr = v1alpha1.SchemeGroupVersion.WithResource("gitsources")

// Config is what the loop needs besides the API.
type Config struct {
	// DataDir holds the clones, in sources/<namespace>/<name>.
	DataDir string
	// Sources are created, or have their spec replaced, when the loop
	// starts (from the hub's command line or config file).
	Sources []v1alpha1.GitSource
	// Hooks, when set, is the webhook receiver that wakes this loop.
	Hooks *Hooks
	// Workers is how many sources are reconciled at once (default 2).
	Workers int
	Log     *slog.Logger
}

// Controller is the GitOps loop. Run it once.
type Controller struct {
	cfg  Config
	log  *slog.Logger
	dyn  dynamic.Interface
	kube kubernetes.Interface
	app  *applier.Applier
	rec  record.EventRecorder
	ctrl *controlloop.Loop
	inf  cache.SharedIndexInformer

	mu     sync.Mutex
	states map[string]*sourceState
}

// sourceState is what the loop remembers of one source between
// reconciles. Only the worker holding the source's key touches it.
type sourceState struct {
	url  string
	repo *source.Repo
	// The loaded revision, so a poll that finds the same commit neither
	// fetches nor parses again.
	revKey string
	objs   []loader.Object
	signer string
}

// New prepares the loop.
func New(cfg Config) *Controller {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	return &Controller{cfg: cfg, log: cfg.Log.With("loop", "gitops"), states: map[string]*sourceState{}}
}

// Run reconciles GitSources until ctx ends; rc is the hub's admin client
// config.
func (c *Controller) Run(ctx context.Context, rc *rest.Config) error {
	if c.cfg.DataDir == "" {
		return errors.New("gitops: a data dir is required for the clones")
	}
	var err error
	if c.dyn, err = dynamic.NewForConfig(rc); err != nil {
		return fmt.Errorf("gitops: dynamic client: %w", err)
	}
	if c.kube, err = kubernetes.NewForConfig(rc); err != nil {
		return fmt.Errorf("gitops: clientset: %w", err)
	}
	c.app = applier.New(c.dyn)
	rec, stop := controlloop.NewRecorder(ctx, c.kube, Component)
	defer stop()
	c.rec = rec
	c.ctrl = controlloop.New("gitops", c.reconcile, controlloop.Options{
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 5*time.Minute),
		Logger:      c.log,
	})
	c.inf = dynamicinformer.NewFilteredDynamicInformer(c.dyn, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	if _, err := c.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.ctrl.Enqueue,
		DeleteFunc: c.ctrl.Enqueue,
		UpdateFunc: func(old, cur any) {
			if specChanged(old, cur) {
				c.ctrl.Enqueue(cur)
			}
		},
	}); err != nil {
		return fmt.Errorf("gitops: %w", err)
	}
	c.ctrl.WaitFor(c.inf.HasSynced)
	go c.inf.Run(ctx.Done())

	for i := range c.cfg.Sources {
		if err := c.ensureSourceRetrying(ctx, &c.cfg.Sources[i]); err != nil {
			return err
		}
	}
	if c.cfg.Hooks != nil {
		c.cfg.Hooks.attach(c)
		defer c.cfg.Hooks.attach(nil)
	}
	return c.ctrl.Run(ctx, c.cfg.Workers)
}

// Trigger reconciles the source ns/name now.
func (c *Controller) Trigger(ns, name string) { c.ctrl.EnqueueKey(controlloop.NameKey(ns, name)) }

// specChanged ignores the loop's own status writes: they must not
// trigger another reconcile. A new reconcile request (an annotation, which
// leaves the generation alone) is a reason to reconcile at once.
func specChanged(old, cur any) bool {
	o, ok1 := old.(*unstructured.Unstructured)
	n, ok2 := cur.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return true
	}
	return o.GetGeneration() != n.GetGeneration() || n.GetDeletionTimestamp() != nil ||
		fmt.Sprint(o.GetFinalizers()) != fmt.Sprint(n.GetFinalizers()) ||
		v1alpha1.ReconcileRequest(o.GetAnnotations()) != v1alpha1.ReconcileRequest(n.GetAnnotations())
}

// get reads the source from the API, not the informer's cache: the
// inventory in its status must be the one the last reconcile wrote, or an
// object applied just before could escape pruning.
func (c *Controller) get(ctx context.Context, key string) (*v1alpha1.GitSource, bool, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, false, err
	}
	u, err := c.dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the GitSource %s: %w", key, err)
	}
	gs, err := fromUnstructured(u)
	return gs, err == nil, err
}

// cached reads the source from the informer's cache.
func (c *Controller) cached(ns, name string) (*v1alpha1.GitSource, bool) {
	obj, exists, err := c.inf.GetStore().GetByKey(controlloop.NameKey(ns, name))
	if err != nil || !exists {
		return nil, false
	}
	gs, err := fromUnstructured(obj.(*unstructured.Unstructured))
	return gs, err == nil
}

func fromUnstructured(u *unstructured.Unstructured) (*v1alpha1.GitSource, error) {
	gs := &v1alpha1.GitSource{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, gs); err != nil {
		return nil, fmt.Errorf("decoding GitSource %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	gs.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("GitSource"))
	return gs, nil
}

func toUnstructured(gs *v1alpha1.GitSource) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(gs)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("GitSource"))
	return u, nil
}

func (c *Controller) state(key string) *sourceState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.states[key]
	if st == nil {
		st = &sourceState{}
		c.states[key] = st
	}
	return st
}

// forget drops what the loop kept of a deleted source, clone included.
func (c *Controller) forget(key string) {
	c.mu.Lock()
	delete(c.states, key)
	c.mu.Unlock()
	if err := os.RemoveAll(c.cloneDir(key)); err != nil {
		c.log.Warn("removing the clone of a deleted source", "source", key, "err", err)
	}
}

func (c *Controller) cloneDir(key string) string {
	return filepath.Join(c.cfg.DataDir, "sources", filepath.FromSlash(key))
}

// Backoff between attempts to write a source given at start.
const (
	ensureBackoffStart = 200 * time.Millisecond
	ensureBackoffMax   = 10 * time.Second
)

// ensureSourceRetrying is ensureSource until it succeeds, the API turns
// the source away (an error a retry cannot change), or ctx ends. What
// may pass (a hub restarting under its own loops, a connection lost, a
// conflict, a 429) is logged and tried again: the loop ending on it
// would end the hub.
func (c *Controller) ensureSourceRetrying(ctx context.Context, want *v1alpha1.GitSource) error {
	backoff := ensureBackoffStart
	for {
		err := c.ensureSource(ctx, want)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if !retriable(err) {
			return err
		}
		c.log.Warn("source given at start not written yet, will retry", "source", want.Namespace+"/"+want.Name, "in", backoff, "err", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(2*backoff, ensureBackoffMax)
	}
}

// retriable tells whether a request that failed with err may succeed
// when sent again unchanged: not when the API answered that the request
// itself is wrong or not allowed. Anything else may pass: a connection
// lost before the answer (a *url.Error) or while reading it (client-go
// says so in a plain error), the hub busy or starting, a conflict.
func retriable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	switch status.Status().Code {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
		http.StatusMethodNotAllowed, http.StatusNotAcceptable, http.StatusRequestEntityTooLarge,
		http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
		return false
	}
	return true
}

// ensureSource creates a source given at start, or makes its spec the
// one given, keeping its status.
func (c *Controller) ensureSource(ctx context.Context, want *v1alpha1.GitSource) error {
	client := c.dyn.Resource(gvr).Namespace(want.Namespace)
	for attempt := 0; ; attempt++ {
		cur, err := client.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gs := want.DeepCopy()
			u, err := toUnstructured(gs)
			if err != nil {
				return err
			}
			_, err = client.Create(ctx, u, metav1.CreateOptions{})
			if err == nil || (apierrors.IsAlreadyExists(err) && attempt < 5) {
				if err == nil {
					c.log.Info("source created", "source", want.Namespace+"/"+want.Name, "url", source.RedactURL(want.Spec.URL))
					return nil
				}
				continue
			}
			return fmt.Errorf("creating the GitSource %s/%s: %w", want.Namespace, want.Name, err)
		case err != nil:
			return fmt.Errorf("reading the GitSource %s/%s: %w", want.Namespace, want.Name, err)
		}
		gs, err := fromUnstructured(cur)
		if err != nil {
			return err
		}
		gs.Spec = want.Spec
		u, err := toUnstructured(gs)
		if err != nil {
			return err
		}
		_, err = client.Update(ctx, u, metav1.UpdateOptions{})
		// Changed or deleted since it was read: read it again.
		if (apierrors.IsConflict(err) || apierrors.IsNotFound(err)) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("updating the GitSource %s/%s: %w", want.Namespace, want.Name, err)
		}
		return nil
	}
}

// jitter spreads polls of many sources over ±10% of the interval.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}
