package agentbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// Options shape a run; zero values take the figures.
type Options struct {
	// Pods is how many pods are started one after another for the start
	// latency (50); each is deleted once Ready, before the next.
	Pods int
	// LoadedPods run together for the second memory figure (20).
	LoadedPods int
	// Settle is how long the agent is left alone before its memory is
	// sampled (15 s: registration, the first lease renewals and informer
	// syncs are over by then).
	Settle time.Duration
	// Samples of VmRSS are taken SampleEvery apart (10 × 1 s); the
	// median is reported.
	Samples     int
	SampleEvery time.Duration
	// BinDir holds flotilla-agent and flotilla-logger; $FLOTILLA_BIN
	// (where `make bench` builds them) when empty, and when that is empty
	// too they are built from the module into a temporary dir.
	BinDir string
	// AgentEnv is added to the agent's environment ("GOGC=50", say, to
	// see what a runtime setting would change).
	AgentEnv []string
	// Trust signs the test image with a fresh key (the cosign CLI) and
	// gives the agent that key, so that every image is verified: once
	// against the registry, then from the verdict cache. Without it the
	// agent's trust dir is empty and nothing is verified.
	Trust bool
	// SkipStart leaves out the pod start latencies: only the idle and
	// loaded figures are taken (the metrics on/off comparison).
	SkipStart bool
	// Log receives progress; discarded when nil.
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Pods <= 0 {
		o.Pods = 50
	}
	if o.LoadedPods <= 0 {
		o.LoadedPods = 20
	}
	if o.Settle <= 0 {
		o.Settle = 15 * time.Second
	}
	if o.Samples <= 0 {
		o.Samples = 10
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = time.Second
	}
	if o.BinDir == "" {
		o.BinDir = os.Getenv("FLOTILLA_BIN")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// Latency summarises a series of durations.
type Latency struct {
	N             int
	P50, P99, Max time.Duration
}

func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	// Nearest rank: the smallest value with at least p% of the series
	// at or below it.
	rank := func(p int) time.Duration {
		i := (p*len(s)+99)/100 - 1
		if i < 0 {
			i = 0
		}
		return s[i]
	}
	return Latency{N: len(s), P50: rank(50), P99: rank(99), Max: s[len(s)-1]}
}

// Results of a run.
type Results struct {
	// ID names what the run created (Node bench-dev-ID, containerd
	// namespaces flotilla-bench-agent-ID and flotilla-bench-bare-ID).
	ID string
	// PodStart is a pod created on the hub until a watcher sees it Ready,
	// the image present on the device.
	PodStart Latency
	// Bare is the same container created and started with the containerd
	// client alone, interleaved with the pods; Ratio = PodStart.P50 /
	// Bare.P50.
	Bare  Latency
	Ratio float64
	// Idle is the agent registered, Ready and without pods; Loaded with
	// Options.LoadedPods pods Running and Ready.
	Idle, Loaded Memory
	// Window is the sampling window of the memory figures.
	Window time.Duration
	// AgentEnv is what the agent's environment had added.
	AgentEnv []string
	// Trust says whether images were verified.
	Trust bool
	// UsageReports and UsageReportBytes are what the device's usage
	// reports wrote to the hub during the loaded sampling window.
	UsageReports, UsageReportBytes int64
}

// Run measures; it needs root, containerd, runc, the CNI plugins and
// docker-registry.
func Run(ctx context.Context, o Options) (res Results, err error) {
	o = o.withDefaults()
	res.AgentEnv, res.Trust = o.AgentEnv, o.Trust
	res.Window = time.Duration(o.Samples-1) * o.SampleEvery
	if os.Geteuid() != 0 {
		return res, errors.New("the agent benchmark needs root (network namespace, containerd, CNI)")
	}
	b, err := newBench(ctx, o)
	if err != nil {
		return res, err
	}
	defer b.close()
	res.ID = b.id

	b.log.Info("agent Ready; settling before the idle sample", "settle", o.Settle)
	if err := sleep(ctx, o.Settle); err != nil {
		return res, err
	}
	if res.Idle, err = b.measureMemory(ctx, o.Samples, o.SampleEvery, 0); err != nil {
		return res, fmt.Errorf("idle memory: %w", err)
	}

	if !o.SkipStart {
		if err := b.startLatencies(ctx, o, &res); err != nil {
			return res, err
		}
	}

	names := make([]string, o.LoadedPods)
	for i := range names {
		names[i] = fmt.Sprintf("load-%d", i)
	}
	if err := b.startPods(ctx, names); err != nil {
		return res, err
	}
	b.log.Info("pods Ready; settling before the loaded sample", "pods", len(names))
	if err := sleep(ctx, o.Settle); err != nil {
		return res, err
	}
	reports, bytes, err := b.usageWritten(ctx)
	if err != nil {
		return res, err
	}
	if res.Loaded, err = b.measureMemory(ctx, o.Samples, o.SampleEvery, len(names)); err != nil {
		return res, fmt.Errorf("memory with %d pods: %w", len(names), err)
	}
	reports2, bytes2, err := b.usageWritten(ctx)
	if err != nil {
		return res, err
	}
	res.UsageReports, res.UsageReportBytes = reports2-reports, bytes2-bytes
	if err := b.deletePods(ctx, names...); err != nil {
		return res, err
	}
	return res, nil
}

// startLatencies starts Options.Pods pods one after another, each beside
// the same container started with the bare containerd client.
func (b *bench) startLatencies(ctx context.Context, o Options, res *Results) error {
	bare, err := b.newBare(ctx)
	if err != nil {
		return err
	}
	// A first pod and container warm caches on both paths (the image's
	// snapshot layers, the shim binary, the agent's informers).
	if _, err := b.startPod(ctx, "warm"); err != nil {
		return err
	}
	if err := b.deletePods(ctx, "warm"); err != nil {
		return err
	}
	if _, err := bare.start(ctx); err != nil {
		return err
	}
	var pods, bares []time.Duration
	for i := 0; i < o.Pods; i++ {
		name := fmt.Sprintf("start-%d", i)
		d, err := b.startPod(ctx, name)
		if err != nil {
			return err
		}
		pods = append(pods, d)
		if err := b.deletePods(ctx, name); err != nil {
			return err
		}
		d, err = bare.start(ctx)
		if err != nil {
			return err
		}
		bares = append(bares, d)
		b.log.Info("pod start", "pod", name, "ready", pods[len(pods)-1], "bare", d)
	}
	res.PodStart, res.Bare = summarize(pods), summarize(bares)
	if res.Bare.P50 > 0 {
		res.Ratio = float64(res.PodStart.P50) / float64(res.Bare.P50)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// pod is the test app, as a Deployment of it would land on the device.
func (b *bench) pod(name string) *corev1.Pod {
	grace := int64(5)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "bench-" + b.id}},
		Spec: corev1.PodSpec{
			NodeName:                      b.node,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "app", Image: b.image,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "DRAIN_DELAY", Value: "0s"},
				},
			}},
		},
	}
}

// startPod creates a pod and returns the time until a watcher, started
// before the create, sees it Ready.
func (b *bench) startPod(ctx context.Context, name string) (time.Duration, error) {
	pods := b.client.CoreV1().Pods("default")
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	start := time.Now()
	if _, err := pods.Create(ctx, b.pod(name), metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("create pod %s: %w", name, err)
	}
	if err := b.waitReady(ctx, w, name); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// startPods creates pods at once, as a rollout lands on a device, and
// waits until all are Ready.
func (b *bench) startPods(ctx context.Context, names []string) error {
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.startPod(ctx, name)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (b *bench) waitReady(ctx context.Context, w watch.Interface, name string) error {
	timeout := time.After(2 * time.Minute)
	var last *corev1.Pod
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("pod %s: the watch closed", name)
			}
			if p, ok := ev.Object.(*corev1.Pod); ok {
				last = p
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						return nil
					}
				}
			}
		case <-timeout:
			return fmt.Errorf("pod %s not Ready within 2m: %s\nagent: %s", name, describe(last), b.agent.tail())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func describe(p *corev1.Pod) string {
	if p == nil {
		return "no status"
	}
	s := fmt.Sprintf("phase %s", p.Status.Phase)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil {
			s += fmt.Sprintf("; %s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		}
		if cs.State.Terminated != nil {
			s += fmt.Sprintf("; %s terminated: %s %d", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		}
	}
	return s
}

// deletePods deletes pods gracefully and waits until the agent has
// stopped them and finished their deletion on the hub.
func (b *bench) deletePods(ctx context.Context, names ...string) error {
	pods := b.client.CoreV1().Pods("default")
	for _, name := range names {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s: %w", name, err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, name := range names {
		for {
			_, err := pods.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pod %s still there 2m after its deletion\nagent: %s", name, b.agent.tail())
			}
			if err := sleep(ctx, 50*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// Lines are the figures, one per line, beside their targets.
func (r Results) Lines() []string {
	mb := func(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }
	env := ", trust off"
	if r.Trust {
		env = ", trust on"
	}
	if len(r.AgentEnv) > 0 {
		env += fmt.Sprintf(" %v", r.AgentEnv)
	}
	var out []string
	if r.PodStart.N > 0 {
		out = append(out,
			fmt.Sprintf("%-44s p50 %v  p99 %v  max %v  (target p50 ≤ 1 s, p99 ≤ 2 s)",
				fmt.Sprintf("agent pod start → Ready, image present (%d)", r.PodStart.N),
				r.PodStart.P50.Round(time.Millisecond), r.PodStart.P99.Round(time.Millisecond), r.PodStart.Max.Round(time.Millisecond)),
			fmt.Sprintf("%-44s p50 %v  p99 %v  max %v  (agent p50 is %.1f× this)",
				fmt.Sprintf("bare containerd create + start (%d)", r.Bare.N),
				r.Bare.P50.Round(time.Millisecond), r.Bare.P99.Round(time.Millisecond), r.Bare.Max.Round(time.Millisecond), r.Ratio))
	}
	for _, m := range []struct {
		name, target string
		m            Memory
	}{{"agent RSS idle" + env, "≤ 40 MB", r.Idle}, {fmt.Sprintf("agent RSS with %d pods%s", r.Loaded.Pods, env), "≤ 60 MB", r.Loaded}} {
		if m.m.RSS == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%-44s %s  (target %s)  peak %s; anon %s + file %s; touched in %v: anon %s + file %s; Go heap in use %s, retained %s, stacks %s, runtime total %s; %d goroutines; CPU %.2f%% of a core",
			m.name, mb(m.m.RSS), m.target, mb(m.m.Peak), mb(m.m.Anon), mb(m.m.File), r.Window, mb(m.m.WorkingSetAnon), mb(m.m.WorkingSetFile),
			mb(m.m.HeapInuse), mb(m.m.HeapRetained), mb(m.m.StackInuse), mb(m.m.GoSys), m.m.Goroutines, m.m.CPU*100))
	}
	if r.UsageReports > 0 {
		out = append(out, fmt.Sprintf("%-44s %d bytes  (%d reports in %v)",
			fmt.Sprintf("usage report per device per interval, %d pods", r.Loaded.Pods), r.UsageReportBytes/r.UsageReports, r.UsageReports, r.Window))
	}
	return out
}
