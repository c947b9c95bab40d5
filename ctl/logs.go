package ctl

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		Use:   "logs [-f] [--previous] [-c CONTAINER] [--tail N] POD",
		Short: "Print a container's log, fetched by the hub from the pod's device",
		Example: "  flotctl logs web-5d8f9c7b6-x2x4q\n  flotctl logs -f --tail 20 web-5d8f9c7b6-x2x4q -c app\n" +
			"  flotctl logs --previous web-5d8f9c7b6-x2x4q   # the instance before the last restart",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runLogs(cmd.Context(), strings.TrimPrefix(strings.TrimPrefix(args[0], "pods/"), "pod/"), o)
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

func (a *App) runLogs(ctx context.Context, name string, o logsOptions) error {
	c, err := a.connect()
	if err != nil {
		return err
	}
	pods := c.Typed.CoreV1().Pods(c.Namespace)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
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
