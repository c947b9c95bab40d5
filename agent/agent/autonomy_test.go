package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/controllers/manager"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/test/testimage"
)

// TestAgentRestartWithoutHub is the edge case the agent exists for: the
// agent restarts while the hub is away. The running container must be
// adopted untouched, a container that dies meanwhile must be restarted
// from the local cache (its ConfigMap too), and the hub's return must
// restart nothing.
func TestAgentRestartWithoutHub(t *testing.T) {
	d := newTestDevice(t)
	d.start()
	bg := context.Background()
	c := d.hub.Client
	d.assignPodCIDR("10.88.9.0/24")
	if _, err := c.CoreV1().ConfigMaps("default").Create(bg, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"greeting": "hello"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := c.CoreV1().Pods("default").Create(bg, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "steady"},
		Spec: corev1.PodSpec{
			NodeName: d.name, HostNetwork: true,
			Containers: []corev1.Container{{
				Name: "app", Image: d.img, Args: []string{"sleep", "1h"},
				Env: []corev1.EnvVar{{Name: "GREETING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "greeting"}}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	running := func(restarts int32) func() bool {
		return func() bool {
			p, err := d.hub.Client.CoreV1().Pods("default").Get(bg, "steady", metav1.GetOptions{})
			if err != nil || len(p.Status.ContainerStatuses) != 1 {
				return false
			}
			s := p.Status.ContainerStatuses[0]
			return s.Ready && s.State.Running != nil && s.RestartCount == restarts
		}
	}
	waitFor(t, "the pod running", 120*time.Second, running(0))

	client, _ := testimage.Containerd(t)
	ctx := namespaces.WithNamespace(bg, d.ns)
	pid := func(attempt uint32) uint32 {
		ctr, err := client.LoadContainer(ctx, runtime.ContainerID(string(pod.UID), "app", attempt))
		if err != nil {
			return 0
		}
		task, err := ctr.Task(ctx, nil)
		if err != nil {
			return 0
		}
		st, err := task.Status(ctx)
		if err != nil || st.Status != "running" {
			return 0
		}
		return task.Pid()
	}
	first := pid(0)
	if first == 0 {
		t.Fatal("no running task for the pod's container")
	}

	// The hub goes away, then the agent restarts.
	d.stop()
	d.hub.Stop()
	d.start()
	time.Sleep(3 * time.Second)
	if got := pid(0); got != first {
		t.Fatalf("after an agent restart without the hub the container's process is %d, want %d (adopted, not restarted)", got, first)
	}

	// A container that dies while the hub is away comes back.
	ctr, err := client.LoadContainer(ctx, runtime.ContainerID(string(pod.UID), "app", 0))
	if err != nil {
		t.Fatal(err)
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed container restarted without the hub", 60*time.Second, func() bool { return pid(1) != 0 },
		func() string { return fmt.Sprintf("attempt 0 pid %d, attempt 1 pid %d", pid(0), pid(1)) })
	second := pid(1)

	// The hub comes back on the same address: the agent reports the
	// restart, and restarts nothing.
	d.hub = d.hub.Restart()
	waitFor(t, "the hub to see the pod running with one restart", 120*time.Second, running(1), func() string {
		p, err := d.hub.Client.CoreV1().Pods("default").Get(bg, "steady", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("status: %+v", p.Status)
	})
	time.Sleep(2 * time.Second)
	if got := pid(1); got != second {
		t.Fatalf("after the hub came back the container's process is %d, want %d (no restart on reconnect)", got, second)
	}
	p, err := d.hub.Client.CoreV1().Pods("default").Get(bg, "steady", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != pod.UID {
		t.Fatalf("the pod was replaced: uid %s, want %s", p.UID, pod.UID)
	}
	d.deletePod("default", "steady")
}

// TestStaticPodsWithoutHub drops a static pod while the hub is away: it
// runs, and once the hub is back it appears there as a mirror pod. Its
// removal stops it and removes the mirror.
func TestStaticPodsWithoutHub(t *testing.T) {
	d := newTestDevice(t)
	d.asNode() // mirror pods are the device's to make
	d.start()
	d.assignPodCIDR("10.88.10.0/24")
	// The hub goes away only once the device has its pod CIDR: a device
	// that never got one has no pod network to run pods on.
	waitFor(t, "the agent to take its pod CIDR", 60*time.Second, func() bool {
		return readCIDR(filepath.Join(d.cfg.DataDir, podCIDRFile)) != ""
	})
	d.hub.Stop()
	path := d.writeStaticPod("edge-cache")
	mirror := "edge-cache-" + d.name
	waitFor(t, "the static pod running without the hub", 60*time.Second, func() bool { return d.pods()["default/"+mirror] })

	d.hub = d.hub.Restart()
	bg := context.Background()
	waitFor(t, "the mirror pod, running, on the hub", 120*time.Second, func() bool {
		p, err := d.hub.Client.CoreV1().Pods("default").Get(bg, mirror, metav1.GetOptions{})
		if err != nil || p.Annotations["kubernetes.io/config.mirror"] == "" || p.Spec.NodeName != d.name {
			return false
		}
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
	})

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the static pod stopped and its mirror gone", 60*time.Second, func() bool {
		_, err := d.hub.Client.CoreV1().Pods("default").Get(bg, mirror, metav1.GetOptions{})
		_, present := d.pods()["default/"+mirror]
		return err != nil && !present
	})
}

// TestStandaloneAgent runs an agent with no hub at all: its static pod
// runs, with no error loop.
func TestStandaloneAgent(t *testing.T) {
	d := newTestDevice(t)
	d.cfg.Credentials = nil
	path := d.writeStaticPod("kiosk")
	d.start()
	waitFor(t, "the static pod running on a standalone device", 60*time.Second, func() bool { return d.pods()["default/kiosk-"+d.name] })
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the static pod stopped and removed", 60*time.Second, func() bool {
		_, present := d.pods()["default/kiosk-"+d.name]
		return !present
	})
}

// TestDevicePods is what a technician on site sees with `flotilla-agent
// pods`: from the running agent, then, with agent and hub gone, from
// what they left on the device.
func TestDevicePods(t *testing.T) {
	d := newTestDevice(t)
	d.start()
	d.assignPodCIDR("10.88.11.0/24")
	bg := context.Background()
	d.sleeper("from-hub", d.img, nil)
	d.writeStaticPod("local")
	view := DeviceView{DataDir: d.cfg.DataDir, ManifestsDir: d.cfg.ManifestsDir, NodeName: d.name,
		ContainerdAddress: testimage.ContainerdSocket, ContainerdNamespace: d.ns, LoggerPath: d.cfg.LoggerPath}
	sources := func(want map[string]string, live bool) func() bool {
		return func() bool {
			rep, err := DevicePods(bg, view)
			if err != nil || rep.Live != live || len(rep.Pods) != len(want) || len(rep.Problems) > 0 {
				return false
			}
			for _, p := range rep.Pods {
				if want[p.Name] != p.Source || p.Phase != corev1.PodRunning || (live && !p.Ready) || p.Restarts != 0 {
					return false
				}
			}
			return true
		}
	}
	show := func() string {
		rep, err := DevicePods(bg, view)
		return fmt.Sprintf("%+v, err %v", rep, err)
	}
	waitFor(t, "both pods ready, from the running agent", 60*time.Second,
		sources(map[string]string{"from-hub": "hub", "local-" + d.name: "static"}, true), show)

	d.stop()
	d.hub.Stop()
	waitFor(t, "both pods running, read from the device", 30*time.Second,
		sources(map[string]string{"from-hub": "cache", "local-" + d.name: "static"}, false), show)

	// Leave nothing running: the agent comes back and removes both.
	d.hub = d.hub.Restart()
	d.start()
	if err := os.Remove(filepath.Join(d.cfg.ManifestsDir, "local.yaml")); err != nil {
		t.Fatal(err)
	}
	d.deletePod("default", "from-hub")
	waitFor(t, "the device empty", 60*time.Second, func() bool { return len(d.pods()) == 0 })
}

// endpointSlicesOnly runs the hub's EndpointSlice controller, so that a
// Service has endpoints, and nothing that would move or evict the test's
// pods.
func endpointSlicesOnly() hubtest.Options {
	return hubtest.Options{Loops: []hub.Loop{{Name: "controllers", Run: func(ctx context.Context, cfg *rest.Config) error {
		return manager.Run(ctx, cfg, manager.Options{Disable: []string{
			manager.Deployment, manager.ReplicaSet, manager.DaemonSet, manager.GarbageCollector, manager.NodeLifecycle, manager.Scheduler,
		}})
	}}}}
}

// TestRebootWithoutHub cuts the power of a device whose hub is away: when
// it comes back, its cached and static pods run again, its Service
// answers and the cluster DNS names it, all from what the device kept on
// disk; when the hub is back, the restart the power cut caused is counted.
func TestRebootWithoutHub(t *testing.T) {
	d := newTestDevice(t, endpointSlicesOnly())
	d.start()
	d.assignPodCIDR("10.88.12.0/24")
	bg := context.Background()
	svc := d.webService()
	d.sleeper("web", d.img, webServer)
	d.writeStaticPod("edge")
	url := "http://" + svc.Spec.ClusterIP + ":80/"
	answers := func() bool { _, err := d.get(url); return err == nil }
	waitFor(t, "the Service answering", 120*time.Second, answers)

	d.stop()
	d.hub.Stop()
	d.powerCut()
	if answers() {
		t.Fatal("the Service still answers after the power cut: the test did not cut enough")
	}
	d.start()
	waitFor(t, "the Service answering after the reboot, without the hub", 120*time.Second, answers, func() string {
		rep, err := DevicePods(bg, DeviceView{DataDir: d.cfg.DataDir, ManifestsDir: d.cfg.ManifestsDir, NodeName: d.name,
			ContainerdAddress: testimage.ContainerdSocket, ContainerdNamespace: d.ns, LoggerPath: d.cfg.LoggerPath})
		nat, _ := exec.Command("nsenter", "--net="+d.hostNS, "iptables-save", "-t", "nat").CombinedOutput()
		addrs, _ := exec.Command("nsenter", "--net="+d.hostNS, "ip", "-br", "addr").CombinedOutput()
		return fmt.Sprintf("device: %+v %v\n%s\n%s", rep, err, nat, addrs)
	})
	waitFor(t, "the static pod running after the reboot", 60*time.Second, func() bool { return d.pods()["default/edge-"+d.name] })
	// The DNS server listens on the pod bridge's address (the pod CIDR's
	// first host), as pods reach it.
	dnsName := "web.default.svc.cluster.local."
	waitFor(t, "the cluster DNS answering for the Service after the reboot, without the hub", 30*time.Second,
		func() bool { return d.resolve("10.88.12.1:53", dnsName) == svc.Spec.ClusterIP },
		func() string {
			return fmt.Sprintf("%s answers %q, want %s", dnsName, d.resolve("10.88.12.1:53", dnsName), svc.Spec.ClusterIP)
		})

	// The hub back: the power cut killed web's container once, and its
	// restart count says so (it survives the reboot, not reset to 0).
	d.hub = d.hub.Restart()
	webStatus := func() string {
		p, err := d.hub.Client.CoreV1().Pods("default").Get(bg, "web", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%+v", p.Status.ContainerStatuses)
	}
	waitFor(t, "the hub to see web Ready with 1 restart", 120*time.Second, func() bool {
		p, err := d.hub.Client.CoreV1().Pods("default").Get(bg, "web", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) != 1 {
			return false
		}
		cs := p.Status.ContainerStatuses[0]
		return cs.Ready && cs.State.Running != nil && cs.RestartCount == 1
	}, webStatus)

	// Leave nothing behind.
	if err := os.Remove(filepath.Join(d.cfg.ManifestsDir, "edge.yaml")); err != nil {
		t.Fatal(err)
	}
	d.deletePod("default", "web")
	waitFor(t, "the device empty", 60*time.Second, func() bool { return len(d.pods()) == 0 })
}

// TestPodCIDRMoves gives a running device another pod CIDR, as a hub
// restored from a backup or a device that joined again would: the agent
// stops to apply it, and its next start moves the bridge, the IPAM state
// and the pod to the new range, instead of failing every pod on the old
// bridge address.
func TestPodCIDRMoves(t *testing.T) {
	d := newTestDevice(t)
	d.start()
	d.assignPodCIDR("10.88.15.0/24")
	bg := context.Background()
	pods := d.hub.Client.CoreV1().Pods("default")
	d.sleeper("web", d.img, func(p *corev1.Pod) { p.Spec.HostNetwork = false })
	ipIn := func(prefix string) func() bool {
		return func() bool {
			p, err := pods.Get(bg, "web", metav1.GetOptions{})
			return err == nil && strings.HasPrefix(p.Status.PodIP, prefix) && len(p.Status.ContainerStatuses) == 1 &&
				p.Status.ContainerStatuses[0].State.Running != nil
		}
	}
	waitFor(t, "the pod running on the first range", 120*time.Second, ipIn("10.88.15."))

	// A Node's pod CIDR never changes; a Node made again gets another.
	if err := d.hub.Client.CoreV1().Nodes().Delete(bg, d.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	d.assignPodCIDR("10.88.16.0/24")
	select {
	case err := <-d.done:
		if !errors.Is(err, ErrPodCIDRChanged) {
			t.Fatalf("Run ended with %v, want ErrPodCIDRChanged", err)
		}
		d.cancel()
		d.cancel = nil
	case <-time.After(60 * time.Second):
		t.Fatal("the agent did not notice the new pod CIDR")
	}
	d.start()
	waitFor(t, "the pod running on the new range", 120*time.Second, ipIn("10.88.16."), func() string {
		p, _ := pods.Get(bg, "web", metav1.GetOptions{})
		ev, _ := d.hub.Client.CoreV1().Events("default").List(bg, metav1.ListOptions{})
		var b strings.Builder
		fmt.Fprintf(&b, "pod: %s %+v\n", p.Status.PodIP, p.Status.ContainerStatuses)
		for _, e := range ev.Items {
			fmt.Fprintf(&b, "event %s: %s\n", e.Reason, e.Message)
		}
		return b.String()
	})
	out, err := exec.Command("nsenter", "--net="+d.hostNS, "ip", "-4", "-br", "addr", "show", "flotilla0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "10.88.16.1/24") || strings.Contains(string(out), "10.88.15.") {
		t.Errorf("bridge after the move: %v\n%s", err, out)
	}
	d.deletePod("default", "web")
	waitFor(t, "the device empty", 60*time.Second, func() bool { return len(d.pods()) == 0 })
}

// TestPodDeletedWhileAway: a pod deleted on the hub while its device was
// away keeps running from the cache until the hub answers, then stops.
func TestPodDeletedWhileAway(t *testing.T) {
	d := newTestDevice(t)
	d.start()
	d.assignPodCIDR("10.88.17.0/24")
	bg := context.Background()
	pods := d.hub.Client.CoreV1().Pods("default")
	d.sleeper("gone", d.img, nil)
	waitFor(t, "the pod running", 120*time.Second, func() bool { return d.pods()["default/gone"] })
	d.stop()
	zero := int64(0)
	if err := pods.Delete(bg, "gone", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	d.hub.Stop()
	d.start()
	time.Sleep(3 * time.Second)
	if !d.pods()["default/gone"] {
		t.Fatal("without the hub, the cached pod stopped: the device cannot know it was deleted")
	}
	d.hub = d.hub.Restart()
	waitFor(t, "the pod stopped once the hub answered", 120*time.Second, func() bool {
		_, present := d.pods()["default/gone"]
		return !present
	})
}

// jobsOnly runs the hub's Job loop and nothing that would move or evict
// the test's pods.
func jobsOnly() hubtest.Options {
	return hubtest.Options{Loops: []hub.Loop{{Name: "controllers", Run: func(ctx context.Context, cfg *rest.Config) error {
		return manager.Run(ctx, cfg, manager.Options{Disable: []string{
			manager.Deployment, manager.ReplicaSet, manager.DaemonSet, manager.CronJob, manager.EndpointSlice,
			manager.GarbageCollector, manager.NodeLifecycle, manager.Scheduler,
		}})
	}}}}
}

// TestJobFinishesWhileHubAway: the pods of two Jobs (restartPolicy
// Never) end while the hub is away, one with exit code 0 and one with 1.
// When the hub is back the agent reports Succeeded and Failed, and the
// Job loop completes the first Job and counts the second's failure.
func TestJobFinishesWhileHubAway(t *testing.T) {
	d := newTestDevice(t, jobsOnly())
	d.start()
	bg := context.Background()
	c := d.hub.Client
	d.assignPodCIDR("10.88.31.0/24")
	newJob := func(name, exit string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: batchv1.JobSpec{BackoffLimit: ptr.To(int32(0)), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				NodeName: d.name, HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "work", Image: d.img, Args: []string{"sleep", "20s", exit}}},
			}}}}
	}
	for _, j := range []*batchv1.Job{newJob("export", "0"), newJob("broken", "1")} {
		if _, err := c.BatchV1().Jobs("default").Create(bg, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podOf := func(job string) (*corev1.Pod, error) {
		l, err := d.hub.Client.CoreV1().Pods("default").List(bg, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
		if err != nil || len(l.Items) != 1 {
			return nil, fmt.Errorf("pods of %s: %d, %v", job, len(l.Items), err)
		}
		return &l.Items[0], nil
	}
	running := func() bool {
		for _, j := range []string{"export", "broken"} {
			if p, err := podOf(j); err != nil || p.Status.Phase != corev1.PodRunning {
				return false
			}
		}
		return true
	}
	waitFor(t, "both Jobs' pods running", 120*time.Second, running)
	exportPod, _ := podOf("export")
	brokenPod, _ := podOf("broken")

	// The hub goes away while the pods run; they end without it.
	d.hub.Stop()
	client, _ := testimage.Containerd(t)
	ctx := namespaces.WithNamespace(bg, d.ns)
	// A container has exited once its task is stopped, or gone (the
	// kubelet deletes a finished task once it has its exit status).
	taskState := func(p *corev1.Pod) string {
		ctr, err := client.LoadContainer(ctx, runtime.ContainerID(string(p.UID), "work", 0))
		if err != nil {
			return "container: " + err.Error()
		}
		task, err := ctr.Task(ctx, nil)
		if errdefs.IsNotFound(err) {
			return "stopped"
		}
		if err != nil {
			return "task: " + err.Error()
		}
		st, err := task.Status(ctx)
		if err != nil {
			return "status: " + err.Error()
		}
		return string(st.Status)
	}
	waitFor(t, "both containers to exit while the hub is away", 60*time.Second,
		func() bool { return taskState(exportPod) == "stopped" && taskState(brokenPod) == "stopped" },
		func() string {
			return fmt.Sprintf("export: %s, broken: %s", taskState(exportPod), taskState(brokenPod))
		})

	// The hub comes back: the results reach it, and the Jobs end.
	d.hub = d.hub.Restart()
	c = d.hub.Client
	jobDone := func(name string, typ batchv1.JobConditionType) func() bool {
		return func() bool {
			j, err := c.BatchV1().Jobs("default").Get(bg, name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, cond := range j.Status.Conditions {
				if cond.Type == typ && cond.Status == corev1.ConditionTrue {
					return true
				}
			}
			return false
		}
	}
	status := func() string {
		var out []string
		for _, name := range []string{"export", "broken"} {
			j, _ := c.BatchV1().Jobs("default").Get(bg, name, metav1.GetOptions{})
			p, _ := podOf(name)
			if j != nil && p != nil {
				out = append(out, fmt.Sprintf("%s: job %+v, pod %s", name, j.Status, p.Status.Phase))
			}
		}
		return strings.Join(out, "\n")
	}
	waitFor(t, "the export Job to complete", 120*time.Second, jobDone("export", batchv1.JobComplete), status)
	waitFor(t, "the broken Job to fail", 60*time.Second, jobDone("broken", batchv1.JobFailed), status)
	for name, want := range map[string]corev1.PodPhase{"export": corev1.PodSucceeded, "broken": corev1.PodFailed} {
		p, err := podOf(name)
		if err != nil || p.Status.Phase != want {
			t.Errorf("%s's pod: %v, %v; want %s", name, p, err, want)
		}
	}
	j, _ := c.BatchV1().Jobs("default").Get(bg, "broken", metav1.GetOptions{})
	if j.Status.Failed != 1 || j.Status.Succeeded != 0 {
		t.Errorf("broken job status %+v, want one failure counted", j.Status)
	}
	j, _ = c.BatchV1().Jobs("default").Get(bg, "export", metav1.GetOptions{})
	if j.Status.Succeeded != 1 || j.Status.Failed != 0 {
		t.Errorf("export job status %+v, want one success", j.Status)
	}
}
