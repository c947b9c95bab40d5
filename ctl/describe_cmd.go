package ctl

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/ctl/describe"
	"flotilla.dev/flotilla/ctl/diagnose"
	"flotilla.dev/flotilla/ctl/term"
)

// logLines is how much of a crashed container's previous log the
// Diagnosis quotes.
const logLines = 10

func (a *App) describeCommand() *cobra.Command {
	var selector string
	cmd := &cobra.Command{
		Use:   "describe KIND [NAME...] | KIND/NAME",
		Short: "Show an object, its conditions, its events and a Diagnosis of where it is stuck",
		Long: "describe shows an object as kubectl does and ends with a Diagnosis: the stage where the\n" +
			"object is stuck (scheduling, the device, image pull, signature check, the application,\n" +
			"readiness, endpoints, the Git source), who owns that stage, and the facts that show why.",
		Example:           "  flotctl describe pod web-5d8f9c7b6-x2x4q\n  flotctl describe node kiosk-7\n  flotctl describe gitsource fleet -n flotilla-system",
		ValidArgsFunction: completeKinds,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runDescribe(cmd.Context(), args, selector)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "describe every object matching this label selector")
	a.addAllNamespaces(cmd)
	return cmd
}

func (a *App) runDescribe(ctx context.Context, args []string, selector string) error {
	reqs, err := parseRequests(args)
	if err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	ns := a.namespace(c)
	failed := false
	first := true
	for _, rq := range reqs {
		rc, err := c.clientFor(rq.res, ns)
		if err != nil {
			return err
		}
		var objs []runtime.Object
		if len(rq.names) == 0 {
			list, err := rc.List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return err
			}
			if objs, err = meta.ExtractList(list); err != nil {
				return err
			}
			if len(objs) == 0 {
				fmt.Fprintln(a.Err, noResources(rq.res, ns))
			}
		}
		for _, name := range rq.names {
			obj, err := rc.Get(ctx, name)
			if err != nil {
				a.report(err)
				failed = true
				continue
			}
			objs = append(objs, obj)
		}
		for _, obj := range objs {
			facts, err := a.factsFor(ctx, c, rq.res, obj)
			if err != nil {
				return err
			}
			text, err := describe.Describe(obj, facts, term.For(a.Out, a.Getenv))
			if err != nil {
				return err
			}
			if !first {
				fmt.Fprintln(a.Out)
			}
			first = false
			fmt.Fprint(a.Out, text)
		}
	}
	if failed {
		return errReported
	}
	return nil
}

// factsFor fetches what the Diagnosis of obj reads: its events, and the
// objects around it (its device, its pods, its endpoints).
func (a *App) factsFor(ctx context.Context, c *Clients, r *api.Resource, obj runtime.Object) (*diagnose.Facts, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	ns := m.GetNamespace()
	f := &diagnose.Facts{Now: a.now()}
	// The hub filters events by namespace only; describe picks its own.
	evs, err := c.Typed.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	f.Events = evs.Items

	nodes := func(sel fields.Selector) error {
		l, err := c.Typed.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
		if err != nil {
			return err
		}
		f.Nodes = l.Items
		ls, err := c.Typed.CoordinationV1().Leases(api.NamespaceNodeLease).List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
		if err != nil {
			return err
		}
		f.Leases = ls.Items
		return nil
	}
	pods := func(sel labels.Selector) error {
		l, err := c.Typed.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return err
		}
		f.Pods = l.Items
		return nil
	}

	switch o := obj.(type) {
	case *corev1.Pod:
		if o.Spec.NodeName != "" {
			if err := nodes(fields.OneTermEqualSelector("metadata.name", o.Spec.NodeName)); err != nil {
				return nil, err
			}
		}
		f.PreviousLogs = a.previousLogs(ctx, c, o)
	case *corev1.Node:
		if err := nodes(fields.OneTermEqualSelector("metadata.name", o.Name)); err != nil {
			return nil, err
		}
		l, err := c.Typed.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", o.Name).String()})
		if err != nil {
			return nil, err
		}
		f.Pods = l.Items
		// A device's events live in the default namespace.
		evs, err := c.Typed.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		f.Events = evs.Items
	case *appsv1.Deployment, *appsv1.DaemonSet, *appsv1.ReplicaSet:
		var ls *metav1.LabelSelector
		switch w := o.(type) {
		case *appsv1.Deployment:
			ls = w.Spec.Selector
		case *appsv1.DaemonSet:
			ls = w.Spec.Selector
		case *appsv1.ReplicaSet:
			ls = w.Spec.Selector
		}
		if sel, err := metav1.LabelSelectorAsSelector(ls); err == nil && !sel.Empty() {
			if err := pods(sel); err != nil {
				return nil, err
			}
		}
		if err := nodes(fields.Everything()); err != nil {
			return nil, err
		}
		switch o.(type) {
		case *appsv1.DaemonSet, *appsv1.Deployment:
			if f.RolloutPolicies, err = a.rolloutPolicies(ctx, c, ns); err != nil {
				return nil, err
			}
		}
		for i := range f.Pods {
			if p := &f.Pods[i]; hasCrashed(p) {
				for k, v := range a.previousLogs(ctx, c, p) {
					if f.PreviousLogs == nil {
						f.PreviousLogs = map[string][]string{}
					}
					f.PreviousLogs[k] = v
				}
				break
			}
		}
	case *corev1.Service:
		if len(o.Spec.Selector) > 0 {
			if err := pods(labels.SelectorFromSet(o.Spec.Selector)); err != nil {
				return nil, err
			}
		}
		es, err := c.Typed.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelServiceName + "=" + o.Name})
		if err != nil {
			return nil, err
		}
		f.EndpointSlices = es.Items
		if err := nodes(fields.Everything()); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func hasCrashed(p *corev1.Pod) bool {
	for _, st := range p.Status.ContainerStatuses {
		if st.RestartCount > 0 && st.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}

// previousLogs fetches the last lines of the previous instance of each
// container that restarted. A device that cannot be reached is no error:
// the Diagnosis then goes without the lines.
func (a *App) previousLogs(ctx context.Context, c *Clients, p *corev1.Pod) map[string][]string {
	out := map[string][]string{}
	for _, st := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if st.RestartCount == 0 || st.LastTerminationState.Terminated == nil {
			continue
		}
		tail := int64(logLines)
		rc, err := c.Typed.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: st.Name, Previous: true, TailLines: &tail}).Stream(ctx)
		if err != nil {
			continue
		}
		lines, _ := readLines(rc, logLines)
		rc.Close()
		if len(lines) > 0 {
			out[diagnose.LogKey(p.Namespace, p.Name, st.Name)] = lines
		}
	}
	return out
}

func readLines(r io.Reader, n int) ([]string, error) {
	var lines []string
	s := bufio.NewScanner(r)
	for s.Scan() {
		lines = append(lines, strings.TrimRight(s.Text(), "\r"))
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines, s.Err()
}
