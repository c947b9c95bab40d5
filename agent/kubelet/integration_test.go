package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"flotilla.dev/flotilla/test/testimage"
)

func TestPodRunsReadyAndReadinessGatesReady(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	p := a.create(a.pod("web", func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.ReadinessProbe = httpProbe("/readyz", 1, 1)
		c.LivenessProbe = httpProbe("/healthz", 1, 3)
	}))
	p = a.wait("web", "Running and Ready", ready)

	_, cidr, _ := net.ParseCIDR(testCIDR)
	if ip := net.ParseIP(p.Status.PodIP); ip == nil || !cidr.Contains(ip) || len(p.Status.PodIPs) != 1 {
		t.Fatalf("pod IP %q not in %s", p.Status.PodIP, testCIDR)
	}
	if p.Status.Phase != corev1.PodRunning || p.Status.HostIP != "192.0.2.10" || p.Status.StartTime == nil || p.Status.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("status = %s", dump(p))
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodReadyToStartContainers} {
		if c := findCondition(p.Status.Conditions, ct); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("condition %s = %+v", ct, c)
		}
	}
	cs := cstatus(p, "app")
	if cs.State.Running == nil || !cs.Ready || cs.Started == nil || !*cs.Started || cs.RestartCount != 0 ||
		!strings.HasPrefix(cs.ContainerID, "containerd://") || !strings.Contains(cs.ImageID, "@sha256:") || cs.Image != a.image {
		t.Fatalf("container status = %+v", cs)
	}
	if _, digest, _ := strings.Cut(a.image, "@"); !strings.HasSuffix(cs.ImageID, digest) {
		t.Fatalf("imageID %s is not the image's digest %s", cs.ImageID, digest)
	}
	env, err := a.http("GET", "http://"+p.Status.PodIP+":8080/env")
	if err != nil || !strings.Contains(env, "POD_NAME=web\n") {
		t.Fatalf("env = %q, %v", env, err)
	}
	resolv, _ := a.http("GET", "http://"+p.Status.PodIP+":8080/file?path=/etc/resolv.conf")
	if !strings.Contains(resolv, "nameserver 10.43.0.10") || !strings.Contains(resolv, "search default.svc.cluster.local svc.cluster.local cluster.local") {
		t.Fatalf("resolv.conf = %q", resolv)
	}
	for _, reason := range []string{"Pulled", "Created", "Started"} {
		a.waitEvent(p, reason, "")
	}

	// The status is written only when it changes: a steady pod is not
	// rewritten across several resyncs.
	rv := p.ResourceVersion
	writes := a.k.status.Writes()
	time.Sleep(3 * a.cfg.ResyncInterval / 2)
	if p2, _ := a.get("web"); p2.ResourceVersion != rv || a.k.status.Writes() != writes {
		t.Fatalf("steady pod rewritten: rv %s -> %s, writes %d -> %d\n%s", rv, p2.ResourceVersion, writes, a.k.status.Writes(), dump(p2))
	}
	if n := a.k.PodCounts(); n.Desired != 1 || n.Running != 1 {
		t.Fatalf("PodCounts = %+v", n)
	}

	// Readiness gates Ready: failing /readyz makes the pod unready
	// without a restart; recovering makes it ready again.
	if _, err := a.http("POST", "http://"+p.Status.PodIP+":8080/fail/readiness?on=true"); err != nil {
		t.Fatal(err)
	}
	p = a.wait("web", "unready", func(p *corev1.Pod) error {
		if ready(p) == nil {
			return errors.New("still Ready")
		}
		return nil
	})
	if c := findCondition(p.Status.Conditions, corev1.ContainersReady); c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" || c.Message != "containers with unready status: [app]" {
		t.Fatalf("ContainersReady = %+v", c)
	}
	if cs := cstatus(p, "app"); cs.RestartCount != 0 || cs.State.Running == nil || cs.Ready {
		t.Fatalf("unready container = %+v", cs)
	}
	a.waitEvent(p, "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503")
	if _, err := a.http("POST", "http://"+p.Status.PodIP+":8080/fail/readiness?on=false"); err != nil {
		t.Fatal(err)
	}
	a.wait("web", "Ready again", ready)
}

func TestLivenessFailureRestarts(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	p := a.create(a.pod("alive", func(p *corev1.Pod) {
		p.Spec.Containers[0].LivenessProbe = httpProbe("/healthz", 1, 2)
	}))
	p = a.wait("alive", "Running", ready)
	first := containerID(p, "app")
	a.eventually("the app answers", func() error {
		_, err := a.http("POST", "http://"+p.Status.PodIP+":8080/fail/liveness?on=true")
		return err
	})
	p = a.wait("alive", "restarted", func(p *corev1.Pod) error {
		cs := cstatus(p, "app")
		if cs.RestartCount < 1 || cs.State.Running == nil || containerID(p, "app") == first {
			return fmt.Errorf("restarts=%d", cs.RestartCount)
		}
		return nil
	})
	cs := cstatus(p, "app")
	if last := cs.LastTerminationState.Terminated; last == nil || last.ContainerID != "containerd://"+first {
		t.Fatalf("lastState = %+v", cs.LastTerminationState)
	}
	a.waitEvent(p, "Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 500")
	a.waitEvent(p, "Killing", "Container app failed liveness probe, will be restarted")
	// The new container does not inherit the failure: it becomes Ready.
	p = a.wait("alive", "Ready after restart", ready)

	// A new image in the spec restarts the container with it.
	variant := testimage.Build(t, testimage.SharedRegistry(t), "testapp", testimage.AppPackage,
		testimage.Options{ExposedPorts: []string{"8080/tcp"}, Env: []string{"VARIANT=b"}})
	p.Spec.Containers[0].Image = variant
	if _, err := a.hub.Client.CoreV1().Pods("default").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, digest, _ := strings.Cut(variant, "@")
	p = a.wait("alive", "running the new image", func(p *corev1.Pod) error {
		cs := cstatus(p, "app")
		if cs.State.Running == nil || !strings.HasSuffix(cs.ImageID, digest) || cs.Image != variant {
			return fmt.Errorf("image %s id %s", cs.Image, cs.ImageID)
		}
		return nil
	})
	a.waitEvent(p, "Killing", "Container app definition changed, will be restarted")
	a.eventually("the new image's environment", func() error {
		env, err := a.http("GET", "http://"+p.Status.PodIP+":8080/env")
		if err != nil || !strings.Contains(env, "VARIANT=b\n") {
			return fmt.Errorf("env %q, %v", env, err)
		}
		return nil
	})
}

func TestCrashLoopBackOff(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	a.create(a.pod("crasher", func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "CRASH_AFTER", Value: "0s"}, corev1.EnvVar{Name: "EXIT_CODE", Value: "3"})
	}))
	sawBackoff := false
	p := a.wait("crasher", "restarted three times", func(p *corev1.Pod) error {
		cs := cstatus(p, "app")
		if cs == nil {
			return errors.New("no status")
		}
		if w := cs.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			sawBackoff = true
			if !strings.Contains(w.Message, "restarting failed container=app pod=crasher_default") {
				return fmt.Errorf("backoff message %q", w.Message)
			}
			if t := cs.LastTerminationState.Terminated; t == nil || t.ExitCode != 3 || t.Reason != "Error" {
				return fmt.Errorf("lastState %+v", cs.LastTerminationState)
			}
			if ready(p) == nil || cs.Ready {
				return errors.New("a container in CrashLoopBackOff is Ready")
			}
		}
		if cs.RestartCount < 3 || !sawBackoff {
			return fmt.Errorf("restarts=%d sawBackoff=%v", cs.RestartCount, sawBackoff)
		}
		return nil
	})
	if p.Status.Phase != corev1.PodRunning {
		t.Fatalf("a crash-looping pod with restartPolicy Always is Running, got %s", p.Status.Phase)
	}
	a.waitEvent(p, "BackOff", "Back-off restarting failed container app in pod crasher_default")
	// Only the last two attempts are kept.
	cs, _ := a.rt.ListContainers(context.Background(), runtimeFilter(p))
	if len(cs) > keepAttempts {
		t.Fatalf("%d container attempts kept", len(cs))
	}
}

func TestOOMKilledAndRestartPolicyNever(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	a.create(a.pod("hungry", func(p *corev1.Pod) {
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		c := &p.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "ALLOC_MIB", Value: "128"})
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: mustQuantity("32Mi")}
	}))
	p := a.wait("hungry", "Failed", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodFailed {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	term := cstatus(p, "app").State.Terminated
	if term == nil || term.Reason != "OOMKilled" || term.ExitCode != 137 || term.FinishedAt.IsZero() {
		t.Fatalf("state = %s", dump(p))
	}
	if cstatus(p, "app").RestartCount != 0 {
		t.Fatal("restartPolicy Never restarted the container")
	}
	if p.Status.QOSClass != corev1.PodQOSBurstable {
		t.Fatalf("qosClass = %s", p.Status.QOSClass)
	}
	// A finished pod gives back its network and sandbox.
	deadline := time.Now().Add(20 * time.Second)
	for {
		sbs, _ := a.rt.ListSandboxes(context.Background())
		if len(sbs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox of a finished pod kept: %+v", sbs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if p, _ := a.get("hungry"); p.Status.PodIP == "" || p.Status.Phase != corev1.PodFailed {
		t.Fatalf("finished pod lost its IP or phase: %s", dump(p))
	}
}

func TestPodsReachEachOtherAndInitContainersRunInOrder(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	server := a.create(a.pod("server", func(p *corev1.Pod) {
		uid, gid := int64(1234), int64(5678)
		ro, noEscalation := true, false
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &gid}
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ReadOnlyRootFilesystem: &ro, AllowPrivilegeEscalation: &noEscalation,
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}))
	client := a.create(a.pod("client", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		mount := []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
		always := corev1.ContainerRestartPolicyAlways
		startup := httpProbe("/healthz", 1, 30)
		startup.HTTPGet.Port = intstr.FromInt32(8081)
		p.Spec.InitContainers = []corev1.Container{
			{Name: "first", Image: a.image, Command: []string{"/testapp", "append", "/work/order", "first"}, VolumeMounts: mount},
			{Name: "proxy", Image: a.image, RestartPolicy: &always, StartupProbe: startup,
				Env: []corev1.EnvVar{{Name: "LISTEN", Value: ":8081"}, {Name: "START_DELAY", Value: "300ms"}}},
			// Succeeds only if the sidecar before it has started.
			{Name: "second", Image: a.image, Command: []string{"/testapp", "get", "http://127.0.0.1:8081/healthz"}},
			{Name: "third", Image: a.image, Command: []string{"/testapp", "append", "/work/order", "third"}, VolumeMounts: mount},
		}
		p.Spec.Containers[0].VolumeMounts = mount
	}))
	server = a.wait("server", "Ready", ready)
	client = a.wait("client", "Ready", ready)
	for _, name := range []string{"first", "second", "third"} {
		cs := cstatus(client, name)
		if cs.State.Terminated == nil || cs.State.Terminated.Reason != "Completed" || !cs.Ready || cs.RestartCount != 0 {
			t.Fatalf("init container %s = %s", name, dump(client))
		}
	}
	if cs := cstatus(client, "proxy"); cs.State.Running == nil || !cs.Ready || !*cs.Started {
		t.Fatalf("sidecar = %s", dump(client))
	}
	var order string
	a.eventually("the client answers", func() error {
		var err error
		order, err = a.http("GET", "http://"+client.Status.PodIP+":8080/file?path=/work/order")
		return err
	})
	if order != "first\nthird\n" {
		t.Fatalf("init order = %q", order)
	}
	// The server runs with its securityContext.
	sid := containerID(server, "app")
	res, err := a.rt.Exec(context.Background(), sid, []string{"/testapp", "cat", "/proc/self/status"}, 10*time.Second)
	if err != nil || !strings.Contains(string(res.Output), "Uid:\t1234") || !strings.Contains(string(res.Output), "Gid:\t5678") ||
		!strings.Contains(string(res.Output), "CapEff:\t0000000000000000") || !strings.Contains(string(res.Output), "NoNewPrivs:\t1") {
		t.Fatalf("/proc/self/status = %q, %v", res.Output, err)
	}
	if res, _ := a.rt.Exec(context.Background(), sid, []string{"/testapp", "append", "/tmp-file", "x"}, 10*time.Second); res.ExitCode == 0 {
		t.Fatal("wrote to a read-only root filesystem")
	}
	if server.Status.PodIP == client.Status.PodIP {
		t.Fatal("two pods share an IP")
	}
	a.eventually("client reaches server by pod IP", func() error {
		res, err := a.rt.Exec(context.Background(), containerID(client, "app"), []string{"/testapp", "get", "http://" + server.Status.PodIP + ":8080/"}, 10*time.Second)
		if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Output), `"podName":"server"`) {
			return fmt.Errorf("client -> server: %+v %q %v", res, res.Output, err)
		}
		return nil
	})
	if n := a.k.PodCounts(); n.Desired != 2 || n.Running != 2 {
		t.Fatalf("PodCounts = %+v", n)
	}
}

func TestTerminationOrder(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	hostDir := t.TempDir()
	p := a.create(a.pod("stubborn", func(p *corev1.Pod) {
		grace := int64(3)
		p.Spec.TerminationGracePeriodSeconds = &grace
		dirType := corev1.HostPathDirectory
		p.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: &dirType}}}}
		c := &p.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "IGNORE_SIGTERM", Value: "1"})
		c.VolumeMounts = []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}
		c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/testapp", "append", "/host/order", "prestop"}}}}
	}))
	p = a.wait("stubborn", "Ready", ready)
	logPath := a.rt.LogPath(runtimeRef(p), "app", 0)

	if err := a.hub.Client.CoreV1().Pods("default").Delete(context.Background(), "stubborn", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleting, err := a.get("stubborn")
	if err != nil || deleting.DeletionTimestamp == nil {
		t.Fatalf("the hub did not start a graceful deletion: %v", err)
	}
	// Follow the container's log while it terminates (the kubelet removes
	// it with the pod).
	var log string
	var gone time.Time
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if b, err := readFile(logPath); err == nil {
			log = b
		}
		if _, err := a.get("stubborn"); err != nil {
			gone = time.Now()
			break
		}
	}
	if gone.IsZero() {
		t.Fatal("the pod was not deleted from the hub")
	}
	order, err := readFile(hostDir + "/order")
	if err != nil || order != "prestop\n" {
		t.Fatalf("preStop hook did not run: %q, %v", order, err)
	}
	sigterm := logTime(t, log, "testapp: SIGTERM")
	if !strings.Contains(log, "testapp: ignoring SIGTERM") {
		t.Fatalf("log lacks the SIGTERM: %q", log)
	}
	if st, err := statTime(hostDir + "/order"); err != nil || st.After(sigterm) {
		t.Fatalf("preStop (%v) ran after SIGTERM (%v)", st, sigterm)
	}
	// The process ignores SIGTERM, so only SIGKILL ends it: the pod can
	// only be gone once the grace period (deletionTimestamp) has passed.
	if gone.Before(deleting.DeletionTimestamp.Time) {
		t.Fatalf("pod gone at %v, before the end of its grace period %v: SIGKILL came early", gone, deleting.DeletionTimestamp.Time)
	}
	a.waitEvent(p, "Killing", "Stopping container app")
	// Everything is released.
	if cs, _ := a.rt.ListContainers(context.Background(), runtimeFilter(p)); len(cs) != 0 {
		t.Fatalf("containers left: %+v", cs)
	}
	if sbs, _ := a.rt.ListSandboxes(context.Background()); len(sbs) != 0 {
		t.Fatalf("sandboxes left: %+v", sbs)
	}
}
