package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api/defaults"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/gitops/applier"
	"flotilla.dev/flotilla/gitops/loader"
	"flotilla.dev/flotilla/gitops/source"
)

// Condition reasons.
const (
	ReasonSucceeded          = "Succeeded"
	ReasonProgressing        = "Progressing"
	ReasonFetchFailed        = "FetchFailed"
	ReasonVerificationFailed = "VerificationFailed"
	ReasonValidationFailed   = "ValidationFailed"
	ReasonApplyFailed        = "ApplyFailed"
	ReasonSuspended          = "Suspended"
)

// Attempt results.
const (
	ResultSucceeded = "Succeeded"
	ResultFailed    = "Failed"
)

// outcome is what one reconcile found and did.
type outcome struct {
	commit string
	res    applier.Result
	// applied is true when the apply went through.
	applied bool
	reason  string
	err     error
	errs    loader.Errors
	dur     time.Duration
	// request is the reconcile request annotation's value when the
	// reconcile began; the status records it as handled.
	request string
}

// stalled says whether retrying the same commit cannot succeed: the
// revision itself is at fault.
func (o *outcome) stalled() bool {
	return o.reason == ReasonValidationFailed || o.reason == ReasonVerificationFailed
}

func (c *Controller) reconcile(ctx context.Context, key string) error {
	gs, exists, err := c.get(ctx, key)
	if err != nil {
		return err
	}
	if !exists {
		c.forget(key)
		return nil
	}
	if gs.DeletionTimestamp != nil {
		return c.finalize(ctx, key, gs)
	}
	if gs, err = c.syncFinalizer(ctx, gs); err != nil {
		return err
	}
	if gs.Spec.Suspend {
		return c.writeStatus(ctx, gs, func(s *v1alpha1.GitSourceStatus) {
			setCondition(s, v1alpha1.ConditionReconciling, false, ReasonSuspended, "the source is suspended", gs.Generation)
			s.Message = "suspended: neither polled nor applied; the applied objects stay"
			s.ObservedGeneration = gs.Generation
		})
	}
	interval := defaults.GitSourceInterval
	if gs.Spec.Interval != nil && gs.Spec.Interval.Duration > 0 {
		interval = gs.Spec.Interval.Duration
	}
	// The next poll; a failure retries sooner, with backoff, through the
	// returned error.
	c.ctrl.EnqueueAfter(key, jitter(interval))

	// The request this reconcile answers is the one it read before
	// fetching: a later one re-queues the source and gets its own fetch.
	o := c.sync(ctx, key, gs)
	o.request = v1alpha1.ReconcileRequest(gs.Annotations)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := c.report(ctx, gs, o); err != nil {
		return err
	}
	return o.err
}

// sync does the work: ls-remote, fetch and load when the commit is new,
// verify, apply.
func (c *Controller) sync(ctx context.Context, key string, gs *v1alpha1.GitSource) *outcome {
	start := time.Now()
	o := &outcome{}
	defer func() { o.dur = time.Since(start) }()
	timeout := defaults.GitSourceTimeout
	if gs.Spec.Timeout != nil && gs.Spec.Timeout.Duration > 0 {
		timeout = gs.Spec.Timeout.Duration
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	fail := func(reason string, err error) *outcome {
		o.reason, o.err = reason, err
		if errors.As(err, &o.errs) {
			o.reason = ReasonValidationFailed
		}
		return o
	}
	st := c.state(key)
	if st.repo == nil || st.url != gs.Spec.URL {
		repo, err := source.Open(c.cloneDir(key), gs.Spec.URL)
		if err != nil {
			return fail(ReasonFetchFailed, err)
		}
		st.repo, st.url, st.revKey, st.objs = repo, gs.Spec.URL, "", nil
	}
	creds, err := c.secretData(ctx, gs.Namespace, gs.Spec.SecretRef, "spec.secretRef")
	if err != nil {
		return fail(ReasonFetchFailed, err)
	}
	ref := source.Ref{Branch: gs.Spec.Ref.Branch, Tag: gs.Spec.Ref.Tag, Commit: gs.Spec.Ref.Commit}
	commit, err := st.repo.Resolve(ctx, ref, source.Credentials(creds))
	if err != nil {
		return fail(ReasonFetchFailed, err)
	}
	o.commit = commit

	revKey := fmt.Sprintf("%s|%d", commit, gs.Generation)
	if st.revKey != revKey {
		st.revKey, st.objs = "", nil
		if commit != gs.Status.LastAttemptedCommit || gs.Generation != gs.Status.ObservedGeneration {
			// Say so before the slow part.
			_ = c.writeStatus(ctx, gs, func(s *v1alpha1.GitSourceStatus) {
				setCondition(s, v1alpha1.ConditionReconciling, true, ReasonProgressing, "applying commit "+commit, gs.Generation)
			})
		}
		if _, err := st.repo.Fetch(ctx, ref, commit, source.Credentials(creds)); err != nil {
			return fail(ReasonFetchFailed, err)
		}
		files, cm, err := st.repo.Files(commit)
		if err != nil {
			return fail(ReasonFetchFailed, err)
		}
		st.signer = ""
		if v := gs.Spec.Verify; v != nil {
			keys, err := c.secretData(ctx, gs.Namespace, &v.SecretRef, "spec.verify.secretRef")
			if err != nil {
				return fail(ReasonVerificationFailed, err)
			}
			tk, err := source.ParseTrustedKeys(keys)
			if err != nil {
				return fail(ReasonVerificationFailed, err)
			}
			if st.signer, err = tk.Verify(cm); err != nil {
				return fail(ReasonVerificationFailed, err)
			}
		}
		objs, err := loader.Load(files, gs.Spec.Paths)
		if err != nil {
			if errors.Is(err, loader.ErrNoPath) {
				return fail(ReasonValidationFailed, loader.Errors{{Msg: err.Error()}})
			}
			return fail(ReasonValidationFailed, err)
		}
		st.revKey, st.objs = revKey, objs
	}

	prune := gs.Spec.Prune == nil || *gs.Spec.Prune
	res, err := c.app.Apply(ctx, applier.Request{
		Source:     sourceLabel(gs),
		Commit:     commit,
		Objects:    st.objs,
		Inventory:  gs.Status.Inventory,
		Prune:      prune,
		AllowEmpty: gs.Spec.AllowEmpty,
	})
	o.res = res
	if err != nil {
		return fail(ReasonApplyFailed, err)
	}
	o.applied, o.reason = true, ReasonSucceeded
	return o
}

func sourceLabel(gs *v1alpha1.GitSource) string { return gs.Namespace + "." + gs.Name }

// secretData reads a Secret the source names; its values are handed on,
// never shown.
func (c *Controller) secretData(ctx context.Context, ns string, ref *v1alpha1.LocalObjectReference, field string) (map[string][]byte, error) {
	if ref == nil || ref.Name == "" {
		return nil, nil
	}
	s, err := c.kube.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the Secret %s/%s named in %s: %w", ns, ref.Name, field, err)
	}
	data := map[string][]byte{}
	for k, v := range s.Data {
		data[k] = v
	}
	for k, v := range s.StringData {
		data[k] = []byte(v)
	}
	return data, nil
}

// report writes the outcome into the status when it says something new,
// and records an Event. A poll that found nothing to do writes nothing.
func (c *Controller) report(ctx context.Context, gs *v1alpha1.GitSource, o *outcome) error {
	changes := o.res.Created + o.res.Updated + o.res.Pruned
	msg := c.message(o)
	ready := findCondition(gs.Status.Conditions, v1alpha1.ConditionReady)
	// A client waiting on its request needs the answer written even when
	// the poll found nothing new.
	answered := o.request == "" || o.request == gs.Status.LastHandledReconcileAt
	quiet := o.applied && changes == 0 && o.commit == gs.Status.LastAppliedCommit &&
		gs.Generation == gs.Status.ObservedGeneration && ready != nil && ready.Status == metav1.ConditionTrue && answered
	if quiet {
		return nil
	}
	if o.applied {
		reason := "Applied"
		if o.commit == gs.Status.LastAppliedCommit && gs.Generation == gs.Status.ObservedGeneration && changes > 0 {
			reason = "DriftCorrected"
		}
		if changes > 0 || o.commit != gs.Status.LastAppliedCommit {
			c.rec.Event(gs, corev1.EventTypeNormal, reason, msg)
		}
		c.log.Info("source applied", "source", gs.Namespace+"/"+gs.Name, "commit", o.commit,
			"created", o.res.Created, "updated", o.res.Updated, "pruned", o.res.Pruned, "unchanged", o.res.Unchanged)
	} else {
		same := gs.Status.Message == msg
		if !same {
			c.rec.Event(gs, corev1.EventTypeWarning, o.reason, truncate(msg, 1024))
		}
		c.log.Warn("source not applied", "source", gs.Namespace+"/"+gs.Name, "commit", o.commit, "reason", o.reason, "err", truncate(msg, 2048))
	}
	return c.writeStatus(ctx, gs, func(s *v1alpha1.GitSourceStatus) {
		now := metav1.Now()
		s.ObservedGeneration = gs.Generation
		if o.commit != "" {
			s.LastAttemptedCommit = o.commit
		}
		s.Message = msg
		if o.request != "" {
			s.LastHandledReconcileAt = o.request
		}
		if o.res.Inventory != nil || o.applied {
			s.Inventory = o.res.Inventory
		}
		s.Errors = statusErrors(o)
		if o.applied {
			s.LastAppliedCommit = o.commit
			s.LastAppliedTime = &now
			setCondition(s, v1alpha1.ConditionReady, true, ReasonSucceeded, msg, gs.Generation)
			setCondition(s, v1alpha1.ConditionStalled, false, ReasonSucceeded, "", gs.Generation)
		} else {
			setCondition(s, v1alpha1.ConditionReady, false, o.reason, msg, gs.Generation)
			if o.stalled() {
				setCondition(s, v1alpha1.ConditionStalled, true, o.reason, "the commit itself is at fault: push a fix (retrying with backoff meanwhile)", gs.Generation)
			} else {
				setCondition(s, v1alpha1.ConditionStalled, false, o.reason, "retrying with backoff", gs.Generation)
			}
		}
		setCondition(s, v1alpha1.ConditionReconciling, false, o.reason, "", gs.Generation)
		result := ResultSucceeded
		if !o.applied {
			result = ResultFailed
		}
		a := v1alpha1.Attempt{Commit: o.commit, Time: now, Result: result, Message: truncate(msg, 512),
			Duration: o.dur.Round(time.Millisecond).String(),
			Created:  o.res.Created, Updated: o.res.Updated, Pruned: o.res.Pruned, Unchanged: o.res.Unchanged}
		if len(s.History) > 0 && s.History[0].Commit == a.Commit && s.History[0].Result == a.Result &&
			s.History[0].Message == a.Message && changes == 0 {
			// The same failure again: refresh it rather than push out
			// the history.
			s.History[0] = a
		} else {
			s.History = append([]v1alpha1.Attempt{a}, s.History...)
		}
		if len(s.History) > maxHistory {
			s.History = s.History[:maxHistory]
		}
	})
}

const (
	maxHistory      = 10
	maxStatusErrors = 50
)

func (c *Controller) message(o *outcome) string {
	short := o.commit
	if len(short) > 12 {
		short = short[:12]
	}
	if o.applied {
		return fmt.Sprintf("applied commit %s: %d created, %d updated, %d pruned, %d unchanged",
			short, o.res.Created, o.res.Updated, o.res.Pruned, o.res.Unchanged)
	}
	what := "commit " + short
	if short == "" {
		what = "the source"
	}
	if len(o.errs) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "%s not applied (nothing was written): %d error(s): ", what, len(o.errs))
		for i, e := range o.errs {
			if i > 0 {
				b.WriteString("; ")
			}
			if i == 5 {
				fmt.Fprintf(&b, "and %d more (see status.errors)", len(o.errs)-5)
				break
			}
			b.WriteString(e.Error())
		}
		return b.String()
	}
	return fmt.Sprintf("%s not applied: %v", what, o.err)
}

func statusErrors(o *outcome) []v1alpha1.SourceError {
	if o.applied {
		return nil
	}
	if len(o.errs) == 0 {
		return []v1alpha1.SourceError{{Message: truncate(fmt.Sprint(o.err), 2048)}}
	}
	out := make([]v1alpha1.SourceError, 0, min(len(o.errs), maxStatusErrors))
	for i, e := range o.errs {
		if i == maxStatusErrors {
			out = append(out, v1alpha1.SourceError{Message: fmt.Sprintf("and %d more errors", len(o.errs)-maxStatusErrors)})
			break
		}
		out = append(out, v1alpha1.SourceError{File: e.File, Line: e.Line, Object: e.Object, Message: truncate(e.Msg, 1024)})
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// syncFinalizer keeps the finalizer exactly when spec.pruneOnDelete asks
// for it.
func (c *Controller) syncFinalizer(ctx context.Context, gs *v1alpha1.GitSource) (*v1alpha1.GitSource, error) {
	has := slices.Contains(gs.Finalizers, Finalizer)
	if has == gs.Spec.PruneOnDelete {
		return gs, nil
	}
	next := gs.DeepCopy()
	if gs.Spec.PruneOnDelete {
		next.Finalizers = append(next.Finalizers, Finalizer)
	} else {
		next.Finalizers = slices.DeleteFunc(next.Finalizers, func(f string) bool { return f == Finalizer })
	}
	u, err := toUnstructured(next)
	if err != nil {
		return nil, err
	}
	out, err := c.dyn.Resource(gvr).Namespace(gs.Namespace).Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("updating the finalizers of %s/%s: %w", gs.Namespace, gs.Name, err)
	}
	return fromUnstructured(out)
}

// finalize deletes the source's objects when it asked for that, then lets
// the deletion finish.
func (c *Controller) finalize(ctx context.Context, key string, gs *v1alpha1.GitSource) error {
	if !slices.Contains(gs.Finalizers, Finalizer) {
		c.forget(key)
		return nil
	}
	res, err := c.app.Apply(ctx, applier.Request{Source: sourceLabel(gs), Inventory: gs.Status.Inventory, Prune: true, AllowEmpty: true})
	if err != nil {
		return fmt.Errorf("deleting the objects of %s: %w", key, err)
	}
	c.log.Info("source deleted with its objects", "source", key, "pruned", res.Pruned)
	next := gs.DeepCopy()
	next.Finalizers = slices.DeleteFunc(next.Finalizers, func(f string) bool { return f == Finalizer })
	u, err := toUnstructured(next)
	if err != nil {
		return err
	}
	if _, err := c.dyn.Resource(gvr).Namespace(gs.Namespace).Update(ctx, u, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer of %s: %w", key, err)
	}
	c.forget(key)
	return nil
}
