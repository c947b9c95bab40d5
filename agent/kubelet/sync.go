package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/kubelet/probes"
	"flotilla.dev/flotilla/agent/kubelet/volumes"
	"flotilla.dev/flotilla/agent/runtime"
)

// keepAttempts is how many attempts of a container are kept: the current
// one and the previous (for lastState and logs --previous).
const keepAttempts = 2

// syncPod reconciles one pod: it reads the desired pod from the sources
// and the actual state from containerd, then takes the steps that bring
// them together.
func (k *Kubelet) syncPod(ctx context.Context, w *podWorker) (syncResult, error) {
	pod, desired := k.sources.get(w.uid)
	if desired {
		w.lastPod = pod
		w.origin = k.sources.origin(w.uid)
		k.objects.setPod(pod)
	} else if !k.sources.syncedFor(w.origin) {
		// The source that has (or may have) this pod has not delivered
		// its whole set yet: after a restart without the hub, a container
		// exit wakes the worker long before the hub answers. "Not
		// desired" means nothing until then, and acting on it would tear
		// down a running pod and its data.
		return syncResult{requeue: time.Second}, nil
	}
	cs, err := k.listContainers(ctx, w.uid)
	if err != nil {
		return syncResult{}, err
	}
	for _, c := range cs {
		k.rememberContainer(c.ID, w.uid)
	}
	sb, err := k.rt.GetSandbox(ctx, string(w.uid))
	if errors.Is(err, runtime.ErrNotFound) {
		sb = nil
	} else if err != nil {
		return syncResult{}, err
	}
	switch {
	case !desired:
		return k.syncGone(ctx, w, cs, sb)
	case pod.DeletionTimestamp != nil:
		return k.syncDeleted(ctx, w, pod, cs, sb)
	case k.terminal(pod):
		return k.syncTerminal(ctx, w, pod, cs, sb)
	}
	return k.syncRunning(ctx, w, pod, cs, sb)
}

// terminal reports whether the pod finished for good (Succeeded or
// Failed), by the hub's status or the one last computed.
func (k *Kubelet) terminal(pod *corev1.Pod) bool {
	phase := pod.Status.Phase
	if st, ok := k.status.Get(pod.UID); ok && (st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed) {
		phase = st.Phase
	}
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

func (k *Kubelet) syncRunning(ctx context.Context, w *podWorker, pod *corev1.Pod, cs []*runtime.Container, sb *runtime.Sandbox) (syncResult, error) {
	if w.getState() != podRunning {
		w.setState(podPending)
	}
	sb, err := k.ensureSandbox(ctx, pod, sb, cs)
	if err != nil {
		k.updateStatus(ctx, w, pod, nil, cs)
		return syncResult{}, err
	}
	vols, err := k.volumes.SetUp(ctx, pod)
	if err != nil {
		for _, e := range unjoin(err) {
			k.event(pod, "", corev1.EventTypeWarning, "FailedMount", "%v", e)
		}
		k.updateStatus(ctx, w, pod, sb, cs)
		return syncResult{}, fmt.Errorf("%w: volumes of pod %s/%s: %w", errWaiting, pod.Namespace, pod.Name, err)
	}

	attempts := byAttempt(cs)
	var retry time.Duration
	var errs []error
	note := func(err error) {
		if err == nil {
			return
		}
		var we *waitErr
		if errors.As(err, &we) && we.retry > 0 {
			if retry == 0 || we.retry < retry {
				retry = we.retry
			}
			return
		}
		errs = append(errs, err)
	}
	initDone := k.syncInitContainers(ctx, w, pod, sb, vols, attempts, note)
	if initDone {
		k.syncAppContainers(ctx, w, pod, sb, vols, attempts, note)
	}

	cs, err = k.listContainers(ctx, pod.UID)
	if err != nil {
		return syncResult{}, err
	}
	k.gcAttempts(ctx, w, cs)
	attempts = byAttempt(cs)

	var running []probes.Running
	for _, c := range append(sidecars(pod), pod.Spec.Containers...) {
		if l := latest(attempts[c.Name]); l != nil && l.Status.State == runtime.StateRunning {
			running = append(running, probes.Running{Name: c.Name, ID: l.ID, StartedAt: l.Status.StartedAt, WasReady: wasReady(pod, l.ID)})
		}
	}
	k.probes.Sync(ctx, pod, sb.IP, running)
	if phase := k.updateStatus(ctx, w, pod, sb, cs); phase == corev1.PodSucceeded || phase == corev1.PodFailed {
		// The next sync releases what a finished pod no longer needs.
		retry = time.Millisecond
	}
	return syncResult{requeue: retry}, errors.Join(errs...)
}

func sidecars(pod *corev1.Pod) []corev1.Container {
	var out []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		if isSidecar(&c) {
			out = append(out, c)
		}
	}
	return out
}

// listContainers reads the pod's containers from the runtime.
func (k *Kubelet) listContainers(ctx context.Context, uid types.UID) ([]*runtime.Container, error) {
	cs, err := k.rt.ListContainers(ctx, runtime.ListFilter{PodUID: string(uid)})
	if err != nil {
		return nil, fmt.Errorf("list containers of pod %s: %w", uid, err)
	}
	return cs, nil
}

func latest(list []*runtime.Container) *runtime.Container {
	if len(list) == 0 {
		return nil
	}
	return list[len(list)-1]
}

// wasReady reads the hub's status: was container id ready?
func wasReady(pod *corev1.Pod, id string) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.ContainerID == "containerd://"+id {
			return s.Ready
		}
	}
	return false
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// syncInitContainers runs init containers in order, each to completion;
// it reports whether all have completed.
func (k *Kubelet) syncInitContainers(ctx context.Context, w *podWorker, pod *corev1.Pod, sb *runtime.Sandbox, vols map[string]volumes.Volume, attempts map[string][]*runtime.Container, note func(error)) bool {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		l := latest(attempts[c.Name])
		if isSidecar(c) {
			if !k.syncSidecar(ctx, w, pod, sb, vols, c, l, note) {
				return false
			}
			continue
		}
		switch {
		case l == nil:
			note(k.startContainer(ctx, w, pod, sb, vols, c, 0))
			return false
		case l.Status.State == runtime.StateRunning:
			return false
		case l.Status.State == runtime.StateExited && l.Status.ExitCode == 0:
			continue
		case pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
			return false // the pod has failed
		default:
			note(k.restartContainer(ctx, w, pod, sb, vols, c, l))
			return false
		}
	}
	return true
}

func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// syncSidecar keeps a sidecar (an init container with restartPolicy
// Always) running whatever the pod's policy, and reports whether the
// containers after it may start: once it has started (passed its startup
// probe), and again whenever it restarts after that.
func (k *Kubelet) syncSidecar(ctx context.Context, w *podWorker, pod *corev1.Pod, sb *runtime.Sandbox, vols map[string]volumes.Volume, c *corev1.Container, l *runtime.Container, note func(error)) bool {
	switch {
	case l == nil:
		note(k.startContainer(ctx, w, pod, sb, vols, c, 0))
		return false
	case l.Status.State == runtime.StateRunning:
		delete(w.waiting, c.Name)
		if k.restartOnProbeFailure(ctx, pod, c, l, sb, note) {
			return true
		}
		return k.probes.Started(pod, c.Name, l.ID) || l.Attempt > 0
	default:
		note(k.restartContainer(ctx, w, pod, sb, vols, c, l))
		return !l.Status.StartedAt.IsZero()
	}
}

// restartOnProbeFailure kills a running container whose liveness or
// startup probe failed; the next sync restarts it.
func (k *Kubelet) restartOnProbeFailure(ctx context.Context, pod *corev1.Pod, c *corev1.Container, l *runtime.Container, sb *runtime.Sandbox, note func(error)) bool {
	kind, failed := k.probes.Failed(pod, c.Name, l.ID)
	if !failed {
		return false
	}
	k.event(pod, c.Name, corev1.EventTypeNormal, "Killing", "Container %s failed %s probe, will be restarted", c.Name, strings.ToLower(string(kind)))
	grace := podGrace(pod)
	if p := probeOf(c, kind); p != nil && p.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
	}
	note(k.killContainer(ctx, pod, c, l, sb, grace))
	// The exit is seen on the next sync, which restarts it per the
	// restart policy.
	note(&waitErr{reason: "Restarting", msg: "after a failed probe", retry: 10 * time.Millisecond})
	return true
}

func (k *Kubelet) syncAppContainers(ctx context.Context, w *podWorker, pod *corev1.Pod, sb *runtime.Sandbox, vols map[string]volumes.Volume, attempts map[string][]*runtime.Container, note func(error)) {
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		l := latest(attempts[c.Name])
		switch {
		case l == nil:
			note(k.startContainer(ctx, w, pod, sb, vols, c, 0))
		case specChanged(c, l):
			if l.Status.State == runtime.StateRunning {
				k.event(pod, c.Name, corev1.EventTypeNormal, "Killing", "Container %s definition changed, will be restarted", c.Name)
				note(k.killContainer(ctx, pod, c, l, sb, podGrace(pod)))
			}
			// A new image starts at once, whatever the restart policy.
			note(k.startContainer(ctx, w, pod, sb, vols, c, l.Attempt+1))
		case l.Status.State == runtime.StateRunning:
			delete(w.waiting, c.Name)
			k.restartOnProbeFailure(ctx, pod, c, l, sb, note)
		default:
			if !shouldRestart(pod.Spec.RestartPolicy, l) {
				continue
			}
			note(k.restartContainer(ctx, w, pod, sb, vols, c, l))
		}
	}
}

func probeOf(c *corev1.Container, kind probes.Kind) *corev1.Probe {
	switch kind {
	case probes.Liveness:
		return c.LivenessProbe
	case probes.Startup:
		return c.StartupProbe
	}
	return c.ReadinessProbe
}

// restartContainer starts the next attempt of c after l finished, unless
// the crash-loop backoff holds it back.
func (k *Kubelet) restartContainer(ctx context.Context, w *podWorker, pod *corev1.Pod, sb *runtime.Sandbox, vols map[string]volumes.Volume, c *corev1.Container, l *runtime.Container) error {
	key := string(pod.UID) + "/" + c.Name
	now := time.Now()
	if d := k.crashBackoff.wait(key, finishedAt(l), now); d > 0 {
		msg := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", k.crashBackoff.delay(key), c.Name, pod.Name, pod.Namespace, pod.UID)
		return k.setWaiting(w, pod, c.Name, "CrashLoopBackOff", msg, d)
	}
	k.crashBackoff.next(key, now)
	return k.startContainer(ctx, w, pod, sb, vols, c, l.Attempt+1)
}

// gcAttempts removes finished attempts beyond the last keepAttempts.
func (k *Kubelet) gcAttempts(ctx context.Context, w *podWorker, cs []*runtime.Container) {
	for _, list := range byAttempt(cs) {
		for i := 0; i < len(list)-keepAttempts; i++ {
			c := list[i]
			if c.Status.State == runtime.StateRunning {
				continue
			}
			if err := k.rt.RemoveContainer(ctx, c.ID); err != nil {
				k.log.Warn("remove old container attempt", "container", c.ID, "err", err)
				continue
			}
			delete(w.startErrors, c.ID)
		}
	}
}

// updateStatus computes the pod's status, hands it to the status manager
// and returns its phase.
func (k *Kubelet) updateStatus(ctx context.Context, w *podWorker, pod *corev1.Pod, sb *runtime.Sandbox, cs []*runtime.Container) corev1.PodPhase {
	old, ok := k.status.Get(pod.UID)
	if !ok {
		old = pod.Status
	}
	in := statusInput{
		pod: pod, old: old, containers: byAttempt(cs), hostIPs: k.nodeHostIPs(ctx),
		waiting: w.waiting, startErrors: w.startErrors, now: time.Now(),
		ready:   func(name, id string) bool { return k.probes.Ready(pod, name, id) },
		started: func(name, id string) bool { return k.probes.Started(pod, name, id) },
		imageID: func(image string) string { return k.imageID(ctx, image) },
	}
	if sb != nil && sb.Ready() {
		switch {
		case pod.Spec.HostNetwork:
			in.podIPs, in.sandboxReady = in.hostIPs, true
		case sb.IP != "":
			in.podIPs, in.sandboxReady = []string{sb.IP}, true
		}
	}
	if pod.DeletionTimestamp == nil {
		if c := k.prepullCondition(ctx, pod); c != nil {
			in.extra = append(in.extra, *c)
		}
	}
	st := computeStatus(in)
	k.status.Set(pod, st)
	switch st.Phase {
	case corev1.PodRunning:
		w.setState(podRunning)
	case corev1.PodSucceeded, corev1.PodFailed:
		w.setState(podFinished)
	default:
		w.setState(podPending)
	}
	return st.Phase
}

// ensureSandbox makes the pod's namespaces and network ready.
func (k *Kubelet) ensureSandbox(ctx context.Context, pod *corev1.Pod, sb *runtime.Sandbox, cs []*runtime.Container) (*runtime.Sandbox, error) {
	if sb != nil && !k.inPodCIDR(sb.IP) {
		// The device was given another pod range: the pod needs an
		// address in it, so a new sandbox, as after a reboot.
		k.event(pod, "", corev1.EventTypeNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created: its address %s is outside the node's pod CIDR %s", sb.IP, k.cfg.PodCIDR)
		for _, c := range cs {
			if c.Status.State == runtime.StateRunning {
				if _, err := k.rt.StopContainer(ctx, c.ID, k.cfg.MinGracePeriod); err != nil {
					return nil, err
				}
			}
		}
		k.cniTeardown(ctx, sb)
		if err := k.rt.RemoveSandbox(ctx, sb.ID); err != nil {
			return nil, err
		}
		sb = nil
	}
	if sb != nil && sb.Ready() && (pod.Spec.HostNetwork || sb.IP != "") {
		return sb, nil
	}
	existed := sb != nil
	if sb == nil || !sb.Ready() {
		// Containers of a lost sandbox (a reboot, a crash mid-creation)
		// cannot join the new one: stop them.
		for _, c := range cs {
			if c.Status.State == runtime.StateRunning {
				if _, err := k.rt.StopContainer(ctx, c.ID, k.cfg.MinGracePeriod); err != nil {
					return nil, err
				}
			}
		}
		if sb != nil && !sb.HostNetwork {
			k.cniTeardown(ctx, sb)
		}
		var err error
		sb, err = k.rt.CreateSandbox(ctx, runtime.SandboxConfig{
			Pod:         runtime.PodRef{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name},
			Hostname:    hostname(pod),
			HostNetwork: pod.Spec.HostNetwork,
			DNS:         k.dnsConfig(pod),
		})
		if err != nil {
			k.event(pod, "", corev1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
			return nil, err
		}
		existed = false
	}
	if pod.Spec.HostNetwork || sb.IP != "" {
		return sb, nil
	}
	if k.cfg.Network == nil {
		err := fmt.Errorf("%w: the agent has no pod network (CNI) configured; only hostNetwork pods can run", errWaiting)
		k.event(pod, "", corev1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
		return nil, err
	}
	at := cni.Attach{Ports: hostPorts(pod)}
	if prev := previousIP(pod); existed || (prev != nil && k.inPodCIDR(prev.String())) {
		// An earlier attempt, or the pod's sandbox before a reboot, may
		// still hold an address under this pod's ID: release it first so
		// IPAM neither refuses the pod nor holds two addresses.
		k.cniTeardown(ctx, sb)
		// The pod keeps the address it had: the EndpointSlices that other
		// devices keep while the hub is away still point at it.
		at.IP = prev
	}
	var ip net.IP
	err := k.inHostNS(func() error {
		var err error
		ip, err = k.cfg.Network.Setup(ctx, sb.ID, sb.NetNS(), at)
		if err != nil && at.IP != nil {
			// Taken meanwhile, or outside a new pod CIDR: any address.
			k.log.Info("the pod's previous address is not available; taking another", "pod", pod.Namespace+"/"+pod.Name, "ip", at.IP, "err", err)
			at.IP = nil
			ip, err = k.cfg.Network.Setup(ctx, sb.ID, sb.NetNS(), at)
		}
		return err
	})
	if err != nil {
		k.event(pod, "", corev1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
		return nil, err
	}
	if err := k.rt.SetSandboxIP(ctx, sb.ID, ip.String()); err != nil {
		return nil, err
	}
	sb.IP = ip.String()
	return sb, nil
}

// inPodCIDR reports whether a sandbox address fits the device's pod
// range ("" and an unknown range always do).
func (k *Kubelet) inPodCIDR(ip string) bool {
	if ip == "" || k.cfg.PodCIDR == nil {
		return true
	}
	parsed := net.ParseIP(ip)
	return parsed == nil || k.cfg.PodCIDR.Contains(parsed)
}

// previousIP is the pod-network address the pod last reported.
func previousIP(pod *corev1.Pod) net.IP {
	if pod.Spec.HostNetwork {
		return nil
	}
	return net.ParseIP(pod.Status.PodIP)
}

func (k *Kubelet) cniTeardown(ctx context.Context, sb *runtime.Sandbox) error {
	if k.cfg.Network == nil || sb.HostNetwork {
		return nil
	}
	return k.inHostNS(func() error { return k.cfg.Network.Teardown(ctx, sb.ID, sb.NetNS()) })
}

// hostname is the pod's hostname: spec.hostname or the pod name, cut to
// a DNS label.
func hostname(pod *corev1.Pod) string {
	h := pod.Spec.Hostname
	if h == "" {
		h = pod.Name
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

func hostPorts(pod *corev1.Pod) []cni.PortMapping {
	var out []cni.PortMapping
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				proto := strings.ToLower(string(p.Protocol))
				if proto == "" {
					proto = "tcp"
				}
				out = append(out, cni.PortMapping{HostPort: p.HostPort, ContainerPort: p.ContainerPort, Protocol: proto, HostIP: p.HostIP})
			}
		}
	}
	return out
}

// dnsConfig is the pod's resolv.conf per its dnsPolicy and dnsConfig; nil
// copies the device's.
func (k *Kubelet) dnsConfig(pod *corev1.Pod) *runtime.DNSConfig {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = corev1.DNSClusterFirst
	}
	if policy == corev1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = corev1.DNSDefault
	}
	if policy == corev1.DNSClusterFirstWithHostNet {
		policy = corev1.DNSClusterFirst
	}
	if policy == corev1.DNSClusterFirst && len(k.cfg.ClusterDNS) == 0 {
		policy = corev1.DNSDefault
	}
	var out runtime.DNSConfig
	switch policy {
	case corev1.DNSClusterFirst:
		d := k.cfg.ClusterDomain
		out.Servers = append(out.Servers, k.cfg.ClusterDNS...)
		out.Searches = []string{pod.Namespace + ".svc." + d, "svc." + d, d}
		out.Options = []string{"ndots:5"}
	case corev1.DNSDefault:
		if pod.Spec.DNSConfig == nil {
			return nil
		}
		out = hostResolvConf("/etc/resolv.conf")
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		out.Servers = append(out.Servers, dc.Nameservers...)
		out.Searches = append(out.Searches, dc.Searches...)
		for _, o := range dc.Options {
			opt := o.Name
			if o.Value != nil {
				opt += ":" + *o.Value
			}
			kept := out.Options[:0]
			for _, have := range out.Options {
				if name, _, _ := strings.Cut(have, ":"); name != o.Name {
					kept = append(kept, have)
				}
			}
			out.Options = append(kept, opt)
		}
	}
	return &out
}

func hostResolvConf(path string) runtime.DNSConfig {
	var out runtime.DNSConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "nameserver":
			out.Servers = append(out.Servers, f[1])
		case "search":
			out.Searches = append(out.Searches, f[1:]...)
		case "options":
			out.Options = append(out.Options, f[1:]...)
		}
	}
	return out
}
