package ctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/printers"
	"flotilla.dev/flotilla/ctl/diagnose"
	"flotilla.dev/flotilla/ctl/output"
	"flotilla.dev/flotilla/ctl/rollout"
)

func (a *App) rolloutCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "rollout", Short: "Follow, list, undo, restart, pause and resume the rollouts of deployments and daemonsets"}

	var follow bool
	var timeout time.Duration
	status := &cobra.Command{
		Use:   "status (deployment|daemonset) NAME | KIND/NAME",
		Short: "Follow a rollout until it is done; fail with the reason when it cannot finish",
		RunE: func(cmd *cobra.Command, args []string) error {
			r, name, err := rolloutTarget(args)
			if err != nil {
				return err
			}
			return a.rolloutStatus(cmd.Context(), r, name, follow, timeout)
		},
	}
	status.Flags().BoolVarP(&follow, "watch", "w", true, "follow the rollout until it is done")
	status.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: never)")

	var revision int64
	history := &cobra.Command{
		Use:   "history (deployment|daemonset) NAME | KIND/NAME",
		Short: "List a deployment's or daemonset's revisions",
		RunE: func(cmd *cobra.Command, args []string) error {
			r, name, err := rolloutTarget(args)
			if err != nil {
				return err
			}
			return a.rolloutHistory(cmd.Context(), r, name, revision)
		},
	}
	history.Flags().Int64Var(&revision, "revision", 0, "show the template of this revision")

	var to int64
	var force bool
	undo := &cobra.Command{
		Use:   "undo (deployment|daemonset) NAME | KIND/NAME",
		Short: "Roll a deployment or daemonset back to its previous revision (or --to-revision)",
		Long: `Roll a deployment or daemonset back to its previous revision (or
--to-revision). A workload applied from a GitSource is refused without
--force: the next sync would put Git's template back; revert the commit
instead.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, name, err := rolloutTarget(args)
			if err != nil {
				return err
			}
			return a.rolloutUndo(cmd.Context(), r, name, to, force)
		},
	}
	undo.Flags().Int64Var(&to, "to-revision", 0, "the revision to roll back to (0: the previous one)")
	undo.Flags().BoolVar(&force, "force", false, "roll back a workload applied from a GitSource (until the next sync restores Git's template)")

	restart := &cobra.Command{
		Use:   "restart (deployment|daemonset) NAME | KIND/NAME",
		Short: "Replace every pod of a deployment or daemonset, one rollout step at a time",
		RunE: func(cmd *cobra.Command, args []string) error {
			r, name, err := rolloutTarget(args)
			if err != nil {
				return err
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			rc, err := c.clientFor(r, c.Namespace)
			if err != nil {
				return err
			}
			if _, err := rc.Patch(cmd.Context(), name, types.StrategicMergePatchType, rollout.RestartPatch(a.now())); err != nil {
				return err
			}
			fmt.Fprintf(a.Out, "%s/%s restarted\n", output.KindGroup(r.GVK()), name)
			return nil
		},
	}
	cmd.AddCommand(status, history, undo, restart, a.rolloutPauseCommand(true), a.rolloutPauseCommand(false), a.rolloutRetryCommand())
	return cmd
}

func rolloutTarget(args []string) (*api.Resource, string, error) {
	var kind, name string
	switch {
	case len(args) == 1 && strings.Contains(args[0], "/"):
		kind, name, _ = strings.Cut(args[0], "/")
	case len(args) == 2:
		kind, name = args[0], args[1]
	default:
		return nil, "", fmt.Errorf("name the workload: deployment NAME, daemonset NAME or KIND/NAME")
	}
	r, err := api.Lookup(kind)
	if err != nil {
		return nil, "", err
	}
	if r.Kind != "Deployment" && r.Kind != "DaemonSet" {
		return nil, "", fmt.Errorf("rollouts are for deployments and daemonsets, not %s", r.GVR.Resource)
	}
	return r, name, nil
}

func statusOf(obj runtime.Object) rollout.Status {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return rollout.DeploymentStatus(o)
	case *appsv1.DaemonSet:
		return rollout.DaemonSetStatus(o)
	}
	return rollout.Status{Err: fmt.Errorf("no rollout for %T", obj)}
}

// rolloutStatus prints a progress line each time it changes, until the
// rollout is done, fails, or the timeout passes. A failure carries the
// Diagnosis of the workload, which names the owner of the stuck stage.
func (a *App) rolloutStatus(ctx context.Context, r *api.Resource, name string, follow bool, timeout time.Duration) error {
	c, err := a.connect()
	if err != nil {
		return err
	}
	rc, err := c.clientFor(r, c.Namespace)
	if err != nil {
		return err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	obj, err := rc.Get(ctx, name)
	if err != nil {
		return err
	}
	if a.isStaged(ctx, c, obj) {
		return a.stagedStatus(ctx, c, r.Kind, name, follow)
	}
	last := ""
	check := func(obj runtime.Object) (bool, error) {
		st := statusOf(obj)
		if st.Err != nil {
			return true, a.explainFailure(ctx, c, obj, st.Err)
		}
		if st.Message != last {
			fmt.Fprintln(a.Out, st.Message)
			last = st.Message
		}
		return st.Done, nil
	}
	if done, err := check(obj); done || err != nil || !follow {
		return err
	}
	m, _ := meta.Accessor(obj)
	rv := m.GetResourceVersion()
	for {
		w, err := rc.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: rv})
		if err != nil {
			return a.rolloutWaitErr(ctx, c, obj, err)
		}
		done, obj2, err := a.followEvents(ctx, w, check)
		w.Stop()
		if obj2 != nil {
			obj = obj2
			if m, err := meta.Accessor(obj); err == nil {
				rv = m.GetResourceVersion()
			}
		}
		if done || err != nil {
			return a.rolloutWaitErr(ctx, c, obj, err)
		}
	}
}

func (a *App) followEvents(ctx context.Context, w watch.Interface, check func(runtime.Object) (bool, error)) (bool, runtime.Object, error) {
	var last runtime.Object
	for {
		select {
		case <-ctx.Done():
			return false, last, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, last, nil
			}
			switch ev.Type {
			case watch.Error:
				return false, last, fmt.Errorf("watching the rollout: %w", apierrors.FromObject(ev.Object))
			case watch.Deleted:
				return true, last, fmt.Errorf("the workload was deleted during the rollout")
			case watch.Added, watch.Modified:
				last = ev.Object
				done, err := check(ev.Object)
				if done || err != nil {
					return true, last, err
				}
			}
		}
	}
}

// rolloutWaitErr turns a timeout into a failure with the reason.
func (a *App) rolloutWaitErr(ctx context.Context, c *Clients, obj runtime.Object, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return a.explainFailure(context.Background(), c, obj, fmt.Errorf("%w: timed out waiting for the rollout to finish", rollout.ErrFailed))
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// explainFailure adds the Diagnosis of a stuck workload to a failure.
func (a *App) explainFailure(ctx context.Context, c *Clients, obj runtime.Object, cause error) error {
	r, ok := resourceOf(obj)
	if !ok {
		return cause
	}
	facts, err := a.factsFor(ctx, c, r, obj)
	if err != nil {
		return cause
	}
	var f diagnose.Finding
	switch o := obj.(type) {
	case *appsv1.Deployment:
		f = diagnose.Deployment(o, facts)
	case *appsv1.DaemonSet:
		f = diagnose.DaemonSet(o, facts)
	}
	if f.Healthy() || f.Summary == "" {
		return cause
	}
	msg := fmt.Sprintf("%v\n  stuck at %s, owner: %s\n  %s", cause, f.Stage, f.Owner, f.Summary)
	for _, d := range f.Details {
		msg += "\n  - " + d
	}
	return fmt.Errorf("%s", msg)
}

func resourceOf(obj runtime.Object) (*api.Resource, bool) {
	gvk, err := output.KindOf(obj)
	if err != nil {
		return nil, false
	}
	return api.ResourceForKind(gvk)
}

func (a *App) rolloutHistory(ctx context.Context, r *api.Resource, name string, revision int64) error {
	w, err := a.workloadHistory(ctx, r, name)
	if err != nil {
		return err
	}
	if revision != 0 {
		for _, h := range w.hist {
			if h.Number == revision {
				fmt.Fprintf(a.Out, "%s/%s with revision #%d\n", w.kindGroup, name, revision)
				f, _ := output.Parse("yaml")
				return f.Print(a.Out, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: h.Name, Namespace: w.meta.GetNamespace()}, Template: *h.Template}, output.TableOptions{})
			}
		}
		return fmt.Errorf("unable to find revision %d of %s %q", revision, strings.ToLower(r.Kind), name)
	}
	fmt.Fprintf(a.Out, "%s/%s\n", w.kindGroup, name)
	tw := printers.NewTabWriter(a.Out)
	fmt.Fprintln(tw, "REVISION\tCHANGE-CAUSE\tTEMPLATE")
	for _, h := range w.hist {
		cause := h.ChangeCause
		if cause == "" {
			cause = "<none>"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", h.Number, cause, rollout.TemplateSummary(h.Template))
	}
	return tw.Flush()
}

func (a *App) rolloutUndo(ctx context.Context, r *api.Resource, name string, to int64, force bool) error {
	w, err := a.workloadHistory(ctx, r, name)
	if err != nil {
		return err
	}
	if src := w.meta.GetLabels()[api.LabelSource]; src != "" && !force {
		// The next sync would put Git's template back, and the undo
		// would flap: the way back is a revert in Git.
		return fmt.Errorf("%s/%s is applied from GitSource %s (label %s): revert the commit in Git (then flotctl reconcile source), or pass --force to roll back until the next sync",
			w.kindGroup, name, src, api.LabelSource)
	}
	patch, rev, err := rollout.UndoPatch(strings.ToLower(r.Kind), name, w.meta.GetAnnotations(), w.hist, to)
	if err != nil {
		return err
	}
	c, _ := a.connect()
	rc, err := c.clientFor(r, c.Namespace)
	if err != nil {
		return err
	}
	if _, err := rc.Patch(ctx, name, types.JSONPatchType, patch); err != nil {
		return err
	}
	fmt.Fprintf(a.Out, "%s/%s rolled back (to the template of revision %d)\n", w.kindGroup, name, rev)
	return nil
}

// workload is a Deployment or DaemonSet with its history.
type workload struct {
	kindGroup string
	meta      metav1.Object
	hist      []rollout.Revision
}

// workloadHistory fetches what history and undo read: a Deployment's
// ReplicaSets, a DaemonSet's ControllerRevisions.
func (a *App) workloadHistory(ctx context.Context, r *api.Resource, name string) (*workload, error) {
	c, err := a.connect()
	if err != nil {
		return nil, err
	}
	w := &workload{kindGroup: output.KindGroup(r.GVK())}
	var sel *metav1.LabelSelector
	switch r.Kind {
	case "Deployment":
		d, err := c.Typed.AppsV1().Deployments(c.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		w.meta, sel = d, d.Spec.Selector
		s, err := listSelector(sel, name)
		if err != nil {
			return nil, err
		}
		rss, err := c.Typed.AppsV1().ReplicaSets(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: s})
		if err != nil {
			return nil, err
		}
		w.hist = rollout.History(d, rss.Items)
	case "DaemonSet":
		ds, err := c.Typed.AppsV1().DaemonSets(c.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		w.meta, sel = ds, ds.Spec.Selector
		s, err := listSelector(sel, name)
		if err != nil {
			return nil, err
		}
		revs, err := c.Typed.AppsV1().ControllerRevisions(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: s})
		if err != nil {
			return nil, err
		}
		w.hist = rollout.DaemonSetHistory(ds, revs.Items)
	default:
		return nil, fmt.Errorf("%s have no rollout history: only deployments and daemonsets do", r.GVR.Resource)
	}
	return w, nil
}

func listSelector(sel *metav1.LabelSelector, name string) (string, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return "", fmt.Errorf("%q has an invalid selector: %w", name, err)
	}
	if s.Empty() {
		return labels.Everything().String(), nil
	}
	return s.String(), nil
}
