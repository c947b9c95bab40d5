package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/ctl/output"
	"flotilla.dev/flotilla/ctl/rollout"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
)

var rolloutPolicyGVR = v1alpha1.SchemeGroupVersion.WithResource("rolloutpolicies")

// stagedPollInterval is how often rollout status reads a staged rollout:
// its progress is in the policy's status, not the workload's, so there is
// no single object to watch.
const stagedPollInterval = time.Second

func (a *App) rolloutPauseCommand(paused bool) *cobra.Command {
	verb, doing := "pause", "Hold"
	if !paused {
		verb, doing = "resume", "Go on with"
	}
	var force bool
	cmd := &cobra.Command{
		Use:   verb + " (deployment|daemonset) NAME | KIND/NAME",
		Short: doing + " the staged rollouts of the RolloutPolicy that selects a workload",
		Long: doing + ` the staged rollouts of the RolloutPolicy that selects the workload, by
setting the policy's spec.paused (so every workload it selects is ` + verb + `d).
A paused rollout gives no further device the new version; the devices of
the current wave keep the version they run.

A policy applied from a GitSource keeps a pause set here across syncs
when its manifest leaves spec.paused out; when the manifest sets it, Git
owns the field and the next sync would put it back, so this is refused
without --force: change it in Git.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, name, err := rolloutTarget(args)
			if err != nil {
				return err
			}
			return a.rolloutPause(cmd.Context(), r, name, paused, force)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "set spec.paused even where Git sets it (until the next sync puts Git's value back)")
	return cmd
}

func (a *App) rolloutPause(ctx context.Context, r *api.Resource, name string, paused, force bool) error {
	st, err := a.stagedWorkload(ctx, r, name, "pause and resume act on the policy that stages a workload; create one whose spec.selector matches (see docs/staged-rollouts.md)")
	if err != nil {
		return err
	}
	c, workload, rp := st.clients, st.name, st.policy
	policy := output.KindGroup(rolloutPolicyGVR.GroupVersion().WithKind("RolloutPolicy")) + "/" + rp.Name
	word := map[bool]string{true: "paused", false: "resumed"}[paused]
	if src := rp.Labels[api.LabelSource]; src != "" {
		if git, sets := gitSetsPaused(rp); sets && git != paused && !force {
			return fmt.Errorf("%s (which stages %s) is applied from GitSource %s, whose manifest sets spec.paused: %t; the next sync would put it back: change it in Git (then flotctl reconcile source), or pass --force",
				policy, workload, src, git)
		}
	}
	note := ""
	if !paused {
		note = failedWaveNote(rp, r, name)
	}
	if rp.Spec.Paused == paused {
		fmt.Fprintf(a.Out, "%s already %s (it stages %s)\n%s", policy, word, workload, note)
		return nil
	}
	prc, err := c.clientFor(rolloutPolicyResource(), c.Namespace)
	if err != nil {
		return err
	}
	patch := fmt.Sprintf(`{"spec":{"paused":%t}}`, paused)
	if _, err := prc.Patch(ctx, rp.Name, types.MergePatchType, []byte(patch)); err != nil {
		return err
	}
	fmt.Fprintf(a.Out, "%s %s (it stages %s and every workload its selector matches)\n%s", policy, word, workload, note)
	if src := rp.Labels[api.LabelSource]; src != "" {
		if _, sets := gitSetsPaused(rp); !sets {
			fmt.Fprintf(a.Out, "note: the policy is applied from GitSource %s, whose manifest leaves spec.paused out: syncs keep this setting\n", src)
		}
	}
	return nil
}

func (a *App) rolloutRetryCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "retry (deployment|daemonset) NAME | KIND/NAME",
		Short: "Judge the failed wave of a workload's staged rollout again",
		Long: `Judge the failed wave of a staged DaemonSet's or Deployment's rollout again,
once what failed it is fixed (a device back online, an image pull
secret, a registry): the wave starts over, its timeout counted from now,
and a rolled-back wave's devices get the new revision again. The
rollout then goes on as if the wave had never failed, or fails again.

It sets the workload's flotilla.dev/rollout-retry-requested-at
annotation, which the hub answers in the policy's status
(lastHandledRetryAt); the workload's spec is not touched. It refuses a
rollout with no failed wave: a paused one goes on with flotctl rollout
resume, and a new template starts a new rollout by itself.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, name, err := rolloutTarget(args)
			if err != nil {
				return err
			}
			return a.rolloutRetry(cmd.Context(), r, name)
		},
	}
}

func (a *App) rolloutRetry(ctx context.Context, r *api.Resource, name string) error {
	st, err := a.stagedWorkload(ctx, r, name, "only a staged rollout has waves to retry")
	if err != nil {
		return err
	}
	rc, workload, rp := st.client, st.name, st.policy
	w := waves.Find(rp, waves.Workload{Kind: r.Kind, Name: name})
	if w == nil || !meta.IsStatusConditionTrue(w.Conditions, v1alpha1.ConditionWaveFailed) {
		state := "not started yet"
		if w != nil {
			state = string(w.Phase)
			if w.CurrentWave != "" {
				state += " at wave " + w.CurrentWave
			}
		}
		return fmt.Errorf("the rollout of %s (RolloutPolicy %s) has no failed wave to retry: it is %s; a paused rollout goes on with flotctl rollout resume %s %s",
			workload, rp.Name, state, strings.ToLower(r.Kind), name)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationRolloutRetryRequestedAt, a.now().UTC().Format(time.RFC3339Nano))
	if _, err := rc.Patch(ctx, name, types.MergePatchType, []byte(patch)); err != nil {
		return err
	}
	fmt.Fprintf(a.Out, "%s: wave %s of RolloutPolicy %s will be judged again (it was %s); follow it with flotctl rollout status %s %s\n",
		workload, w.CurrentWave, rp.Name, w.Phase, strings.ToLower(r.Kind), name)
	return nil
}

// staged is a workload and the RolloutPolicy that stages it.
type staged struct {
	clients *Clients
	client  resourceClient // of the workload's resource
	name    string         // kind/name, as kubectl names it
	policy  *v1alpha1.RolloutPolicy
}

// stagedWorkload finds the workload r/name in the current namespace and
// the policy that stages it; a workload no policy selects is an error
// ending with why, which says what the command needs it for.
func (a *App) stagedWorkload(ctx context.Context, r *api.Resource, name, why string) (staged, error) {
	c, err := a.connect()
	if err != nil {
		return staged{}, err
	}
	rc, err := c.clientFor(r, c.Namespace)
	if err != nil {
		return staged{}, err
	}
	obj, err := rc.Get(ctx, name)
	if err != nil {
		return staged{}, err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return staged{}, err
	}
	workload := output.KindGroup(r.GVK()) + "/" + name
	rp, err := a.stagingPolicy(ctx, c, c.Namespace, m.GetLabels())
	if err != nil {
		return staged{}, err
	}
	if rp == nil {
		return staged{}, fmt.Errorf("no RolloutPolicy in namespace %s selects %s (labels %s): %s",
			c.Namespace, workload, labels.Set(m.GetLabels()).String(), why)
	}
	return staged{clients: c, client: rc, name: workload, policy: rp}, nil
}

// failedWaveNote is what resume says of a rollout it cannot lift: a failed
// wave holds until a retry or a new template, whatever spec.paused says.
func failedWaveNote(rp *v1alpha1.RolloutPolicy, r *api.Resource, name string) string {
	w := waves.Find(rp, waves.Workload{Kind: r.Kind, Name: name})
	if w == nil || !meta.IsStatusConditionTrue(w.Conditions, v1alpha1.ConditionWaveFailed) {
		return ""
	}
	return fmt.Sprintf("note: the rollout of %s/%s failed at wave %s and stays %s after a resume: flotctl rollout retry %s %s judges the wave again\n",
		strings.ToLower(r.Kind), name, w.CurrentWave, w.Phase, strings.ToLower(r.Kind), name)
}

// gitSetsPaused reads the manifest a GitSource last applied the policy
// from: whether it sets spec.paused, and to what.
func gitSetsPaused(rp *v1alpha1.RolloutPolicy) (value, sets bool) {
	raw := rp.Annotations[api.AnnotationLastApplied]
	if raw == "" {
		return false, false
	}
	var m struct {
		Spec map[string]json.RawMessage `json:"spec"`
	}
	if json.Unmarshal([]byte(raw), &m) != nil {
		return false, false
	}
	v, ok := m.Spec["paused"]
	if !ok {
		return false, false
	}
	var b bool
	_ = json.Unmarshal(v, &b)
	return b, true
}

// rolloutPolicyResource is the served RolloutPolicy resource (in api's
// table, so it is always found).
func rolloutPolicyResource() *api.Resource {
	r, _ := api.ResourceFor(rolloutPolicyGVR)
	return r
}

// stagingPolicy returns the RolloutPolicy of namespace ns that stages a
// workload with these labels, or nil. A hub that does not serve
// RolloutPolicies stages nothing.
func (a *App) stagingPolicy(ctx context.Context, c *Clients, ns string, workloadLabels map[string]string) (*v1alpha1.RolloutPolicy, error) {
	policies, err := a.rolloutPolicies(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	return waves.PolicyFor(policies, workloadLabels), nil
}

func (a *App) rolloutPolicies(ctx context.Context, c *Clients, ns string) ([]*v1alpha1.RolloutPolicy, error) {
	rc, err := c.clientFor(rolloutPolicyResource(), ns)
	if err != nil {
		return nil, err
	}
	obj, err := rc.List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the RolloutPolicies of namespace %s: %w", ns, err)
	}
	list, ok := obj.(*v1alpha1.RolloutPolicyList)
	if !ok {
		return nil, fmt.Errorf("listing the RolloutPolicies of namespace %s: got %T", ns, obj)
	}
	out := make([]*v1alpha1.RolloutPolicy, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// stagedStatus follows a DaemonSet's or Deployment's (kind) staged
// rollout from its policy's status: a line per change of wave progress,
// until every wave is done (success), a wave failed (failure, with the
// failing devices), or ctx ends.
func (a *App) stagedStatus(ctx context.Context, c *Clients, kind, name string, follow bool) error {
	last := ""
	var obj runtime.Object
	for {
		var (
			cur    runtime.Object
			labels map[string]string
			err    error
		)
		if kind == "Deployment" {
			var d *appsv1.Deployment
			if d, err = c.Typed.AppsV1().Deployments(c.Namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
				cur, labels = d, d.Labels
			}
		} else {
			var ds *appsv1.DaemonSet
			if ds, err = c.Typed.AppsV1().DaemonSets(c.Namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
				cur, labels = ds, ds.Labels
			}
		}
		if err != nil {
			if obj != nil {
				return a.rolloutWaitErr(ctx, c, obj, err)
			}
			return err
		}
		first := obj == nil
		obj = cur
		policies, err := a.rolloutPolicies(ctx, c, c.Namespace)
		if err != nil {
			return a.rolloutWaitErr(ctx, c, obj, err)
		}
		rp := waves.PolicyFor(policies, labels)
		if first && rp != nil {
			// Say so once: the other policies' waves, pause and criteria
			// do not apply here.
			for _, other := range policies {
				if other.Name != rp.Name && other.DeletionTimestamp == nil && waves.Selects(other, labels) {
					fmt.Fprintf(a.Out, "note: RolloutPolicy %q also selects %s %s but ignores it: RolloutPolicy %q (the first by name) stages it\n", other.Name, strings.ToLower(kind), name, rp.Name)
				}
			}
		}
		var st rollout.Status
		switch o := cur.(type) {
		case *appsv1.Deployment:
			if rp == nil {
				st = rollout.DeploymentStatus(o)
			} else {
				st = rollout.StagedDeploymentStatus(o, rp)
			}
		case *appsv1.DaemonSet:
			if rp == nil {
				st = rollout.DaemonSetStatus(o)
			} else {
				st = rollout.StagedDaemonSetStatus(o, rp)
			}
		}
		if st.Err != nil {
			return a.explainFailure(ctx, c, cur, st.Err)
		}
		if st.Message != last {
			fmt.Fprintln(a.Out, st.Message)
			last = st.Message
		}
		if st.Done || !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return a.rolloutWaitErr(ctx, c, obj, ctx.Err())
		case <-time.After(stagedPollInterval):
		}
	}
}

// isStaged reports whether a RolloutPolicy stages obj (a DaemonSet or a
// Deployment).
func (a *App) isStaged(ctx context.Context, c *Clients, obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	switch obj.(type) {
	case *appsv1.DaemonSet, *appsv1.Deployment:
	default:
		return false
	}
	rp, err := a.stagingPolicy(ctx, c, m.GetNamespace(), m.GetLabels())
	return err == nil && rp != nil
}
