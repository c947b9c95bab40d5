package applier

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/gitops/loader"
)

// Applier writes revisions through the hub's API.
type Applier struct {
	dyn     dynamic.Interface
	workers int
}

// New returns an Applier that uses dyn for every read and write.
func New(dyn dynamic.Interface) *Applier {
	return &Applier{dyn: dyn, workers: 8}
}

// Request is one revision to apply.
type Request struct {
	// Source is the value of api.LabelSource: "<namespace>.<name>".
	Source string
	// Commit is recorded in api.AnnotationSourceCommit of what is written.
	Commit  string
	Objects []loader.Object
	// Inventory is what the source applied before; only these objects
	// are ever pruned.
	Inventory []v1alpha1.InventoryEntry
	Prune     bool
	// AllowEmpty lets a revision without objects prune everything.
	AllowEmpty bool
}

// Result counts what was done.
type Result struct {
	Created, Updated, Pruned, Unchanged int
	// Inventory is what the source now owns: the revision's objects after
	// a success; after a failure, the previous inventory plus whatever was
	// written, so that nothing written is ever forgotten.
	Inventory []v1alpha1.InventoryEntry
}

// ErrEmpty means the revision holds no objects and would prune all.
var ErrEmpty = errors.New("the revision holds no objects")

type action int

const (
	actUnchanged action = iota
	actCreate
	actUpdate
)

type step struct {
	it     *item
	act    action
	obj    *unstructured.Unstructured // to write
	liveRV string
	// dryRunNS is the namespace to dry-run a create in when its own is
	// created by the same revision and does not exist yet.
	dryRunNS string
}

// Apply makes the hub match req. When the revision itself is at fault it
// returns loader.Errors and writes nothing; other errors (the API
// unreachable, a conflicting writer) are worth retrying.
func (a *Applier) Apply(ctx context.Context, req Request) (Result, error) {
	res := Result{Inventory: req.Inventory}
	items, problems := plan(req.Objects, req.Source)
	desired := map[key]bool{}
	for _, it := range items {
		desired[it.key] = true
	}
	var prune []key
	pruneRes := map[key]*api.Resource{}
	for _, e := range req.Inventory {
		k, r, ok := inventoryKey(e)
		if ok && !desired[k] {
			prune = append(prune, k)
			pruneRes[k] = r
		}
	}
	if len(items) == 0 && len(problems) == 0 && req.Prune && len(prune) > 0 && !req.AllowEmpty {
		problems = append(problems, &loader.Error{File: "(revision)", Msg: fmt.Sprintf(
			"%v: applying it would prune all %d objects of the source; if that is intended, set spec.allowEmpty", ErrEmpty, len(prune))})
	}
	if len(problems) > 0 {
		return res, problems
	}

	live, err := a.live(ctx, req.Source, items)
	if err != nil {
		return res, err
	}
	steps := make([]*step, len(items))
	newNS := map[string]bool{}
	for i, it := range items {
		s := &step{it: it}
		steps[i] = s
		l := live[it.key]
		switch {
		case l == nil:
			s.act, s.obj = actCreate, forCreate(it, req.Commit)
			if it.key.Kind == "Namespace" && it.key.Group == "" {
				newNS[it.key.Name] = true
			}
		case l.GetLabels()[api.LabelSource] != req.Source:
			owner := l.GetLabels()[api.LabelSource]
			if owner == "" {
				problems = append(problems, it.fail("the object exists and was not created by this source; to hand it over, label it %s=%s", api.LabelSource, req.Source))
			} else {
				problems = append(problems, it.fail("the object belongs to the source %s; remove it from one of the two", owner))
			}
		case disabled(l) || disabled(it.obj):
			s.act = actUnchanged
		default:
			m, err := merge(it, l, req.Commit)
			if err != nil {
				problems = append(problems, it.fail("%v", err))
				continue
			}
			if m != nil {
				s.act, s.obj, s.liveRV = actUpdate, m, l.GetResourceVersion()
				m.SetResourceVersion(l.GetResourceVersion())
			}
		}
	}
	for _, s := range steps {
		if s.act == actCreate && s.it.res.Namespaced && newNS[s.it.key.Namespace] {
			s.dryRunNS = api.NamespaceDefault
		}
	}
	if len(problems) > 0 {
		return res, problems
	}

	// Validate every write before making any.
	var mu sync.Mutex
	var transient error
	a.each(ctx, steps, func(s *step) {
		if s.act == actUnchanged {
			return
		}
		err := a.write(ctx, s, true)
		if err == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if isRevisionError(err) {
			problems = append(problems, s.it.fail("%s", apiMessage(err, s)))
		} else if transient == nil {
			transient = fmt.Errorf("dry run of %s: %w", s.it.key, err)
		}
	})
	if len(problems) > 0 {
		sortErrors(problems)
		return res, problems
	}
	if transient != nil {
		return res, transient
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}

	// Write, stage by stage.
	inv := map[key]v1alpha1.InventoryEntry{}
	for _, e := range req.Inventory {
		if k, _, ok := inventoryKey(e); ok {
			inv[k] = e
		}
	}
	for lo := 0; lo < len(steps); {
		hi := lo
		for hi < len(steps) && stage(steps[hi].it.key.Kind) == stage(steps[lo].it.key.Kind) {
			hi++
		}
		var errs []error
		a.each(ctx, steps[lo:hi], func(s *step) {
			var err error
			if s.act != actUnchanged {
				err = a.write(ctx, s, false)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.it.key, err))
				return
			}
			inv[s.it.key] = inventoryEntry(s.it)
			switch s.act {
			case actCreate:
				res.Created++
			case actUpdate:
				if s.obj.GetResourceVersion() == s.liveRV {
					// The server found nothing to change (e.g. a quantity
					// written in another form).
					res.Unchanged++
				} else {
					res.Updated++
				}
			default:
				res.Unchanged++
			}
		})
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
		}
		if len(errs) > 0 {
			res.Inventory = sortedInventory(inv)
			return res, fmt.Errorf("applying: %w", errors.Join(errs...))
		}
		lo = hi
	}

	if req.Prune {
		n, err := a.prune(ctx, req.Source, prune, pruneRes, inv)
		res.Pruned = n
		if err != nil {
			res.Inventory = sortedInventory(inv)
			return res, err
		}
	}
	res.Inventory = make([]v1alpha1.InventoryEntry, 0, len(items))
	for _, it := range items {
		res.Inventory = append(res.Inventory, inventoryEntry(it))
	}
	sortInventory(res.Inventory)
	return res, nil
}

func disabled(u *unstructured.Unstructured) bool {
	return u.GetAnnotations()[api.AnnotationReconcile] == ReconcileDisabled
}

// live reads the current state of every object of the revision: one list
// per kind for the objects the source owns, one get for each of the rest
// (new objects, or objects someone else owns).
func (a *Applier) live(ctx context.Context, source string, items []*item) (map[key]*unstructured.Unstructured, error) {
	out := map[key]*unstructured.Unstructured{}
	kinds := map[*api.Resource]bool{}
	for _, it := range items {
		kinds[it.res] = true
	}
	sel := labels.Set{api.LabelSource: source}.AsSelector().String()
	for r := range kinds {
		list, err := a.dyn.Resource(r.GVR).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("listing the %s of the source: %w", r.GVR.Resource, err)
		}
		for i := range list.Items {
			u := &list.Items[i]
			gvk := u.GroupVersionKind()
			out[key{Group: gvk.Group, Kind: gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName()}] = u
		}
	}
	var missing []*item
	for _, it := range items {
		if out[it.key] == nil {
			missing = append(missing, it)
		}
	}
	var mu sync.Mutex
	var firstErr error
	a.eachItem(ctx, missing, func(it *item) {
		u, err := a.client(it.res, it.key.Namespace).Get(ctx, it.key.Name, metav1.GetOptions{})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			if firstErr == nil {
				firstErr = fmt.Errorf("reading %s: %w", it.key, err)
			}
		default:
			out[it.key] = u
		}
	})
	return out, firstErr
}

func (a *Applier) client(r *api.Resource, ns string) dynamic.ResourceInterface {
	if r.Namespaced {
		return a.dyn.Resource(r.GVR).Namespace(ns)
	}
	return a.dyn.Resource(r.GVR)
}

// write creates or updates one object, or only asks the server whether it
// would (dry run). An update carries the resourceVersion it was computed
// from, so a concurrent change is a conflict, not lost.
func (a *Applier) write(ctx context.Context, s *step, dry bool) error {
	var dr []string
	if dry {
		dr = []string{metav1.DryRunAll}
	}
	switch s.act {
	case actCreate:
		obj, ns := s.obj, s.it.key.Namespace
		if dry && s.dryRunNS != "" {
			obj = obj.DeepCopy()
			obj.SetNamespace(s.dryRunNS)
			ns = s.dryRunNS
		}
		_, err := a.client(s.it.res, ns).Create(ctx, obj, metav1.CreateOptions{DryRun: dr, FieldValidation: "Strict"})
		return err
	case actUpdate:
		out, err := a.client(s.it.res, s.it.key.Namespace).Update(ctx, s.obj, metav1.UpdateOptions{DryRun: dr, FieldValidation: "Strict"})
		if err == nil && !dry {
			s.obj.SetResourceVersion(out.GetResourceVersion())
		}
		return err
	}
	return nil
}

// prune deletes the objects that left the revision, in reverse order of
// apply, when they still carry the source's label.
func (a *Applier) prune(ctx context.Context, source string, keys []key, res map[key]*api.Resource, inv map[key]v1alpha1.InventoryEntry) (int, error) {
	sort.SliceStable(keys, func(i, j int) bool { return stage(keys[i].Kind) > stage(keys[j].Kind) })
	n := 0
	var errs []error
	for _, k := range keys {
		c := a.client(res[k], k.Namespace)
		live, err := c.Get(ctx, k.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			delete(inv, k)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s to prune it: %w", k, err))
			continue
		}
		if live.GetLabels()[api.LabelSource] != source || disabled(live) {
			// Handed over or opted out: no longer the source's to delete.
			delete(inv, k)
			continue
		}
		uid := live.GetUID()
		bg := metav1.DeletePropagationBackground
		err = c.Delete(ctx, k.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &bg})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("pruning %s: %w", k, err))
			continue
		}
		delete(inv, k)
		n++
	}
	if len(errs) > 0 {
		return n, errors.Join(errs...)
	}
	return n, nil
}

// isRevisionError says whether the server refused the object itself
// (retrying the same revision cannot help) rather than failing to answer.
func isRevisionError(err error) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return false
	}
	code := int(se.Status().Code)
	return code >= 400 && code < 500 && code != http.StatusConflict && code != http.StatusTooManyRequests &&
		code != http.StatusUnauthorized && code != http.StatusRequestTimeout
}

func apiMessage(err error, s *step) string {
	if apierrors.IsNotFound(err) && s.act == actCreate && s.it.res.Namespaced {
		return fmt.Sprintf("the namespace %q does not exist: add a Namespace manifest or create it (%v)", s.it.key.Namespace, err)
	}
	return err.Error()
}

func sortErrors(es loader.Errors) {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].File != es[j].File {
			return es[i].File < es[j].File
		}
		return es[i].Line < es[j].Line
	})
}

func sortedInventory(m map[key]v1alpha1.InventoryEntry) []v1alpha1.InventoryEntry {
	out := make([]v1alpha1.InventoryEntry, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	sortInventory(out)
	return out
}

func sortInventory(es []v1alpha1.InventoryEntry) {
	sort.Slice(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.APIVersion != b.APIVersion {
			return a.APIVersion < b.APIVersion
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}

// each runs fn over steps with a bounded number of requests in flight.
func (a *Applier) each(ctx context.Context, steps []*step, fn func(*step)) {
	parallel(ctx, a.workers, len(steps), func(i int) { fn(steps[i]) })
}

func (a *Applier) eachItem(ctx context.Context, items []*item, fn func(*item)) {
	parallel(ctx, a.workers, len(items), func(i int) { fn(items[i]) })
}

func parallel(ctx context.Context, workers, n int, fn func(int)) {
	if n == 0 {
		return
	}
	if workers > n {
		workers = n
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
}
