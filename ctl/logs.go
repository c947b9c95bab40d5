package ctl

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"flotilla.dev/flotilla/api/podutil"
)

type logsOptions struct {
	follow, previous, timestamps bool
	container                    string
	tail                         int64
	since                        time.Duration
}

func (a *App) logsCommand() *cobra.Command {
	var o logsOptions
	cmd := &cobra.Command{
		Use:   "logs [-f] [--previous] [-c CONTAINER] [--tail N] POD | TYPE/NAME",
		Short: "Print a container's log, fetched by the hub from the pod's device",
		Example: "  flotctl logs web-5d8f9c7b6-x2x4q\n  flotctl logs -f --tail 20 web-5d8f9c7b6-x2x4q -c app\n" +
			"  flotctl logs --previous web-5d8f9c7b6-x2x4q   # the instance before the last restart\n" +
			"  flotctl logs deployment/web                  # one of the deployment's pods",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runLogs(cmd.Context(), args[0], o)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&o.follow, "follow", "f", false, "keep streaming new lines")
	f.BoolVarP(&o.previous, "previous", "p", false, "the log of the previous instance of the container")
	f.BoolVar(&o.timestamps, "timestamps", false, "prefix each line with its time")
	f.StringVarP(&o.container, "container", "c", "", "the container (default: the only or first one)")
	f.Int64Var(&o.tail, "tail", -1, "print only the last N lines (-1: all)")
	f.DurationVar(&o.since, "since", 0, "only lines newer than this, e.g. 5m")
	return cmd
}

func (a *App) runLogs(ctx context.Context, arg string, o logsOptions) error {
	c, err := a.connect()
	if err != nil {
		return err
	}
	pods := c.Typed.CoreV1().Pods(c.Namespace)
	var pod *corev1.Pod
	kind, name, isRef := strings.Cut(arg, "/")
	if !isRef {
		kind, name = "pod", arg
	}
	switch strings.ToLower(kind) {
	case "pod", "pods", "po":
		if pod, err = pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
	default:
		if pod, err = a.podOf(ctx, c.Typed, c.Namespace, kind, name); err != nil {
			return err
		}
	}
	name = pod.Name
	container, err := pickContainer(pod, o.container)
	if err != nil {
		return err
	}
	if o.container == "" && len(pod.Spec.Containers) > 1 {
		fmt.Fprintf(a.Err, "Defaulted container %q out of: %s\n", container, containerNames(pod))
	}
	opts := &corev1.PodLogOptions{Container: container, Follow: o.follow, Previous: o.previous, Timestamps: o.timestamps}
	if o.tail >= 0 {
		opts.TailLines = &o.tail
	}
	if o.since > 0 {
		s := int64(o.since.Seconds())
		opts.SinceSeconds = &s
	}
	rc, err := pods.GetLogs(name, opts).Stream(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.Copy(a.Out, rc); err != nil && ctx.Err() == nil {
		return fmt.Errorf("reading the log of %s/%s: %w", name, container, err)
	}
	return nil
}

// podOf picks, as kubectl does for `logs TYPE/NAME`, one pod of a
// workload: a ready one if there is one, then a running one, the newest
// first, and says which on stderr.
func (a *App) podOf(ctx context.Context, cs kubernetes.Interface, ns, kind, name string) (*corev1.Pod, error) {
	var sel *metav1.LabelSelector
	switch strings.ToLower(kind) {
	case "deployment", "deployments", "deploy":
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		sel = d.Spec.Selector
	case "replicaset", "replicasets", "rs":
		r, err := cs.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		sel = r.Spec.Selector
	case "daemonset", "daemonsets", "ds":
		d, err := cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		sel = d.Spec.Selector
	default:
		return nil, fmt.Errorf("cannot get logs of %s/%s: logs come from pods, deployments, replicasets and daemonsets", kind, name)
	}
	ls, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("the selector of %s/%s: %w", kind, name, err)
	}
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: ls.String()})
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("%s/%s has no pods", kind, name)
	}
	rank := func(p *corev1.Pod) int {
		switch {
		case p.DeletionTimestamp != nil:
			return 0
		case podutil.IsReady(p):
			return 3
		case p.Status.Phase == corev1.PodRunning:
			return 2
		}
		return 1
	}
	items := list.Items
	sort.SliceStable(items, func(i, j int) bool {
		if ri, rj := rank(&items[i]), rank(&items[j]); ri != rj {
			return ri > rj
		}
		return items[j].CreationTimestamp.Before(&items[i].CreationTimestamp)
	})
	if len(items) > 1 {
		fmt.Fprintf(a.Err, "Found %d pods, using pod/%s\n", len(items), items[0].Name)
	}
	return &items[0], nil
}

func pickContainer(pod *corev1.Pod, want string) (string, error) {
	if want == "" {
		if d := pod.Annotations["kubectl.kubernetes.io/default-container"]; d != "" {
			return d, nil
		}
		if len(pod.Spec.Containers) == 0 {
			return "", fmt.Errorf("pod %s has no containers", pod.Name)
		}
		return pod.Spec.Containers[0].Name, nil
	}
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			if c.Name == want {
				return want, nil
			}
		}
	}
	return "", fmt.Errorf("container %s is not valid for pod %s: choose one of: %s", want, pod.Name, containerNames(pod))
}

func containerNames(pod *corev1.Pod) string {
	var names []string
	for _, c := range pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}
