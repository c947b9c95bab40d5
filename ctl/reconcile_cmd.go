package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
)

// defaultSourceName is the GitSource flotilla-hub serve makes from
// --source-url unless --source-name says otherwise.
const defaultSourceName = "default"

// The GitOps loop's condition reasons (gitops/controller), which say what
// to do about a failed fetch or apply.
const (
	reasonFetchFailed        = "FetchFailed"
	reasonVerificationFailed = "VerificationFailed"
	reasonValidationFailed   = "ValidationFailed"
	reasonApplyFailed        = "ApplyFailed"
)

func (a *App) reconcileCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "reconcile", Short: "Ask the hub to act now instead of at its next poll"}
	var timeout time.Duration
	src := &cobra.Command{
		Use:     "source [NAME]",
		Aliases: []string{"gitsource", "gs"},
		Short:   "Fetch a GitSource now and wait until its newest commit is applied",
		Long: "Asks the hub to fetch the GitSource now (the annotation " + v1alpha1.AnnotationReconcileRequestedAt + ")\n" +
			"and waits until it has fetched and applied the newest commit, then prints that commit and\n" +
			"what it changed. Without NAME and -n, the source is the hub's own (flotilla-system/default,\n" +
			"made from flotilla-hub serve --source-url). Follow a workload's rollout afterwards with\n" +
			"`flotctl rollout status`.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.reconcileSource(cmd.Context(), args, timeout)
		},
	}
	src.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long (0: never)")
	cmd.AddCommand(src)
	return cmd
}

func (a *App) reconcileSource(ctx context.Context, args []string, timeout time.Duration) error {
	c, err := a.connect()
	if err != nil {
		return err
	}
	ns, name, defaulted := c.Namespace, defaultSourceName, true
	if len(args) == 1 {
		name, defaulted = args[0], false
	}
	if defaulted && a.flags.Namespace == "" {
		ns = api.NamespaceSystem
	}
	client := c.Dynamic.Resource(gitSourceGVR).Namespace(ns)
	u, err := client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && defaulted {
		return fmt.Errorf("the hub has no GitSource %s/%s, the one flotilla-hub serve makes from --source-url: name the source to fetch (flotctl get gitsources -A lists them)", ns, name)
	}
	if err != nil {
		return err
	}
	gs, err := decodeGitSource(u)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("gitsource %s/%s", ns, name)
	if gs.Spec.Suspend {
		return errSuspended(what)
	}

	// Any new value is a new request; the time makes it unique and says
	// when it was asked for. Flux's annotation, when the source carries
	// one, gets the same value, so that neither hides the other.
	token := a.now().UTC().Format(time.RFC3339Nano)
	ann := map[string]string{v1alpha1.AnnotationReconcileRequestedAt: token}
	if _, ok := gs.Annotations[v1alpha1.AnnotationFluxReconcileRequestedAt]; ok {
		ann[v1alpha1.AnnotationFluxReconcileRequestedAt] = token
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	if _, err := client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "flotctl"}); err != nil {
		return err
	}
	fmt.Fprintf(a.Out, "%s: fetch requested, waiting for the hub to apply the newest commit\n", what)

	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	last := gs
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return client.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return client.Watch(ctx, o)
		},
	}
	var result error
	_, err = watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("%s was deleted while waiting for it", what)
		}
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		cur, err := decodeGitSource(u)
		if err != nil {
			return false, err
		}
		last = cur
		done, res := sourceAnswer(what, cur)
		result = res
		return done, nil
	})
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return errNotHandled(what, timeout, last)
	case err != nil:
		return err
	case result != nil:
		return result
	}
	fmt.Fprintf(a.Out, "%s: %s\n", what, appliedSummary(last))
	return nil
}

func decodeGitSource(u *unstructured.Unstructured) (*v1alpha1.GitSource, error) {
	gs := &v1alpha1.GitSource{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, gs); err != nil {
		return nil, fmt.Errorf("decoding gitsource %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return gs, nil
}

// sourceAnswer says whether the hub has answered the source's pending
// request, and how: nil when the newest commit is applied. The request
// that counts is the one on the object now: a later one than ours, set by
// someone else, is answered by a later fetch, which answers ours too.
func sourceAnswer(what string, gs *v1alpha1.GitSource) (bool, error) {
	if gs.Spec.Suspend {
		return true, errSuspended(what)
	}
	req := v1alpha1.ReconcileRequest(gs.Annotations)
	if req == "" || gs.Status.LastHandledReconcileAt != req {
		return false, nil
	}
	st := gs.Status
	ready := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	if ready != nil && ready.Status == metav1.ConditionTrue && st.LastAppliedCommit != "" && st.LastAppliedCommit == st.LastAttemptedCommit {
		return true, nil
	}
	return true, notApplied(what, gs, ready)
}

// appliedSummary names the applied commit and what applying it changed,
// from the attempt the hub recorded for it.
func appliedSummary(gs *v1alpha1.GitSource) string {
	st := gs.Status
	s := "applied commit " + st.LastAppliedCommit
	if len(st.History) > 0 && st.History[0].Commit == st.LastAppliedCommit {
		h := st.History[0]
		s += fmt.Sprintf(": %d created, %d updated, %d pruned, %d unchanged", h.Created, h.Updated, h.Pruned, h.Unchanged)
	}
	return s
}

func errSuspended(what string) error {
	return fmt.Errorf("%s is suspended (spec.suspend: true): the hub neither fetches nor applies it; set spec.suspend to false in its manifest and run this again", what)
}

// notApplied explains a failed fetch or apply: what failed, the hub's
// reasons, what stays applied, and what to do.
func notApplied(what string, gs *v1alpha1.GitSource, ready *metav1.Condition) error {
	st := gs.Status
	reason, msg := "", st.Message
	if ready != nil {
		reason = ready.Reason
	}
	var b strings.Builder
	if reason != "" {
		fmt.Fprintf(&b, "%s: the hub did not apply the newest commit (%s): %s", what, reason, msg)
	} else {
		fmt.Fprintf(&b, "%s: the hub did not apply the newest commit: %s", what, msg)
	}
	// The message already quotes a single error; a list is worth its lines.
	if len(st.Errors) > 1 {
		for _, e := range st.Errors {
			b.WriteString("\n  - ")
			if e.File != "" {
				b.WriteString(e.File)
				if e.Line > 0 {
					fmt.Fprintf(&b, ":%d", e.Line)
				}
				b.WriteString(": ")
			}
			if e.Object != "" {
				b.WriteString(e.Object + ": ")
			}
			b.WriteString(e.Message)
		}
	}
	if st.LastAppliedCommit != "" {
		fmt.Fprintf(&b, "\n  commit %s stays applied", st.LastAppliedCommit)
	} else {
		b.WriteString("\n  nothing from this source is applied yet")
	}
	b.WriteString("\n  to do: ")
	switch reason {
	case reasonFetchFailed:
		b.WriteString("check that the hub reaches spec.url and that the Secret in spec.secretRef holds valid credentials, then run this again")
	case reasonVerificationFailed:
		b.WriteString("sign the commit with a key trusted in spec.verify.secretRef (git commit -S), push it, and run this again")
	case reasonValidationFailed:
		b.WriteString("fix what is named above in the repository, push, and run this again")
	case reasonApplyFailed:
		b.WriteString("the hub refused to write an object (above): fix it in the repository, push, and run this again")
	default:
		fmt.Fprintf(&b, "see flotctl describe gitsource %s -n %s", gs.Name, gs.Namespace)
	}
	return errors.New(b.String())
}

// errNotHandled explains a timeout: the request is still pending.
func errNotHandled(what string, timeout time.Duration, last *v1alpha1.GitSource) error {
	busy := ""
	if c := meta.FindStatusCondition(last.Status.Conditions, v1alpha1.ConditionReconciling); c != nil && c.Status == metav1.ConditionTrue {
		busy = " (the hub says: " + c.Message + ")"
	}
	return fmt.Errorf("%s: timed out after %s waiting for the hub to fetch and apply the newest commit%s\n"+
		"  the request stays set: the hub answers it when it can\n"+
		"  to do: check that the hub runs its GitOps loop (its log says) and that one fetch fits in spec.timeout; wait longer with --timeout, or see flotctl describe gitsource %s -n %s",
		what, timeout, busy, last.Name, last.Namespace)
}
