package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestConfigMapsSecretsAndVolumesInside(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	ctx := context.Background()
	cms := a.hub.Client.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data: map[string]string{"color": "blue", "app.conf": "level=debug\n"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.hub.Client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data: map[string][]byte{"password": []byte("s3cret"), "user": []byte("admin")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mode := int32(0o400)
	p := a.create(a.pod("configured", func(p *corev1.Pod) {
		p.Labels["tier"] = "front"
		c := &p.Spec.Containers[0]
		c.Env = append(c.Env,
			corev1.EnvVar{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "color"}}},
			corev1.EnvVar{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
			corev1.EnvVar{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			corev1.EnvVar{Name: "MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: mustQuantity("1Mi")}}},
			corev1.EnvVar{Name: "GREETING", Value: "hello $(POD_NAME) in $(COLOR)"},
		)
		c.EnvFrom = []corev1.EnvFromSource{{Prefix: "CREDS_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}}
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: mustQuantity("128Mi"), corev1.ResourceCPU: mustQuantity("500m")}
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: mustQuantity("128Mi"), corev1.ResourceCPU: mustQuantity("500m")}
		c.WorkingDir = "/scratch"
		p.Spec.Volumes = []corev1.Volume{
			{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}},
			{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds", Items: []corev1.KeyToPath{{Key: "password", Path: "pw", Mode: &mode}}}}},
			{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		}
		c.VolumeMounts = []corev1.VolumeMount{
			{Name: "cfg", MountPath: "/etc/app"},
			{Name: "cfg", MountPath: "/etc/app.conf", SubPath: "app.conf"},
			{Name: "sec", MountPath: "/etc/creds"},
			{Name: "info", MountPath: "/etc/info"},
			{Name: "scratch", MountPath: "/scratch"},
		}
	}))
	p = a.wait("configured", "Ready", ready)
	base := "http://" + p.Status.PodIP + ":8080"
	var env string
	a.eventually("the app answers", func() error {
		var err error
		env, err = a.http("GET", base+"/env")
		return err
	})
	for _, want := range []string{"COLOR=blue", "PASSWORD=s3cret", "CREDS_user=admin", "CREDS_password=s3cret",
		"POD_IP=" + p.Status.PodIP, "MEM=128", "GREETING=hello configured in blue", "POD_NAME=configured"} {
		if !strings.Contains(env, want+"\n") {
			t.Errorf("env lacks %s:\n%s", want, env)
		}
	}
	files := map[string]string{
		"/etc/app/color":    "blue",
		"/etc/app/app.conf": "level=debug\n",
		"/etc/app.conf":     "level=debug\n",
		"/etc/creds/pw":     "s3cret",
		"/etc/info/labels":  "app=\"configured\"\ntier=\"front\"",
	}
	for path, want := range files {
		if got, err := a.http("GET", base+"/file?path="+path); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
	}
	if ls, _ := a.http("GET", base+"/ls?path=/etc/creds/..data"); !strings.Contains(ls, "-r-------- pw") {
		t.Errorf("secret file mode: %q", ls)
	}
	// workingDir, and the emptyDir is a writable tmpfs.
	id := containerID(p, "app")
	res, err := a.rt.Exec(ctx, id, []string{"/testapp", "append", "relative", "x"}, 5*time.Second)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("write in workingDir: %+v %v", res, err)
	}
	if got, _ := a.http("GET", base+"/file?path=/scratch/relative"); got != "x\n" {
		t.Errorf("workingDir file = %q", got)
	}
	if mounts, _ := a.http("GET", base+"/file?path=/proc/mounts"); !strings.Contains(mounts, "tmpfs /scratch tmpfs") {
		t.Errorf("emptyDir medium Memory is not a tmpfs:\n%s", mounts)
	}
	// Resources reach the cgroup (read from the host: v2 or v1 layout).
	cg := "/" + a.rt.Namespace() + "/" + id
	if got := cgroupValue(cg, "memory.max", "memory/memory.limit_in_bytes"); got != "134217728" {
		t.Errorf("memory limit = %q", got)
	}
	if got := cgroupValue(cg, "cpu.max", "cpu/cpu.cfs_quota_us"); got != "50000 100000" && got != "50000" {
		t.Errorf("cpu quota = %q", got)
	}
	if got := cgroupValue(cg, "cpu.weight", "cpu/cpu.shares"); got != "512" && got != "20" {
		t.Errorf("cpu shares = %q", got)
	}
	if p.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Errorf("qosClass = %s", p.Status.QOSClass)
	}

	// Volumes follow the ConfigMap (the subPath mount, as in Kubernetes,
	// does not).
	cm, _ := cms.Get(ctx, "settings", metav1.GetOptions{})
	cm.Data["color"] = "green"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.eventually("the volume shows the new ConfigMap", func() error {
		got, err := a.http("GET", base+"/file?path=/etc/app/color")
		if err != nil || got != "green" {
			return fmt.Errorf("color = %q, %v", got, err)
		}
		return nil
	})
	// Labels change: the downward API file follows.
	cur, _ := a.get("configured")
	cur.Labels["tier"] = "back"
	if _, err := a.hub.Client.CoreV1().Pods("default").Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.eventually("the downward API volume shows the new labels", func() error {
		got, _ := a.http("GET", base+"/file?path=/etc/info/labels")
		if !strings.Contains(got, `tier="back"`) {
			return fmt.Errorf("labels = %q", got)
		}
		return nil
	})
	if cs := cstatus(mustGet(t, a, "configured"), "app"); cs.RestartCount != 0 {
		t.Fatal("a ConfigMap change restarted the container")
	}
}

func mustGet(t *testing.T, a *agent, name string) *corev1.Pod {
	t.Helper()
	p, err := a.get(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBadInputWaitsWithReasonsAndIsRetried(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	ctx := context.Background()
	cms := a.hub.Client.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "partial"}, Data: map[string]string{"a": "1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	registryHost := strings.Split(a.image, "/")[0]
	missingKey := a.create(a.pod("missing-key", func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "B", ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "partial"}, Key: "b"}}})
	}))
	noImage := a.create(a.pod("no-image", func(p *corev1.Pod) {
		p.Spec.Containers[0].Image = registryHost + "/does-not-exist@sha256:" + strings.Repeat("ab", 32)
	}))
	noCommand := a.create(a.pod("no-command", func(p *corev1.Pod) {
		p.Spec.Containers[0].Command = []string{"/bin/nope"}
	}))
	noMount := a.create(a.pod("no-mount", func(p *corev1.Pod) {
		dirType := corev1.HostPathDirectory
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/nonexistent/flotilla-test", Type: &dirType}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	}))
	a.create(a.pod("healthy", nil))

	// Other pods are not held back.
	a.wait("healthy", "Ready beside bad pods", ready)

	p := a.wait("missing-key", "CreateContainerConfigError", func(p *corev1.Pod) error {
		if r := waitingReason(p, "app"); r != "CreateContainerConfigError" {
			return fmt.Errorf("reason %q", r)
		}
		return nil
	})
	if msg := cstatus(p, "app").State.Waiting.Message; msg != "couldn't find key b in ConfigMap default/partial" {
		t.Errorf("message = %q", msg)
	}
	a.waitEvent(missingKey, "Failed", "Error: couldn't find key b in ConfigMap default/partial")

	p = a.wait("no-image", "ImagePullBackOff", func(p *corev1.Pod) error {
		if r := waitingReason(p, "app"); r != "ImagePullBackOff" {
			return fmt.Errorf("reason %q", r)
		}
		return nil
	})
	if msg := cstatus(p, "app").State.Waiting.Message; !strings.Contains(msg, "Back-off pulling image") {
		t.Errorf("message = %q", msg)
	}
	a.waitEvent(noImage, "Failed", "Failed to pull image")
	a.waitEvent(noImage, "BackOff", "Back-off pulling image")

	p = a.wait("no-command", "RunContainerError or CrashLoopBackOff", func(p *corev1.Pod) error {
		cs := cstatus(p, "app")
		if cs == nil {
			return errors.New("no status")
		}
		if w := cs.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			if last := cs.LastTerminationState.Terminated; last != nil && last.Reason == "StartError" && last.ExitCode == 128 && cs.RestartCount >= 1 {
				return nil
			}
		}
		return fmt.Errorf("state %s", stateString(cs.State))
	})
	a.waitEvent(noCommand, "Failed", "/bin/nope")

	p = a.wait("no-mount", "ContainerCreating", func(p *corev1.Pod) error {
		if r := waitingReason(p, "app"); r != "ContainerCreating" {
			return fmt.Errorf("reason %q", r)
		}
		return nil
	})
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("phase = %s", p.Status.Phase)
	}
	a.waitEvent(noMount, "FailedMount", `MountVolume.SetUp failed for volume "data" : hostPath type check failed: /nonexistent/flotilla-test is not a directory`)

	// Fixing the input is enough: the pods are retried.
	cm, _ := cms.Get(ctx, "partial", metav1.GetOptions{})
	cm.Data["b"] = "2"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.wait("missing-key", "Ready once the key exists", ready)
	if h, _ := a.get("healthy"); ready(h) != nil || cstatus(h, "app").RestartCount != 0 {
		t.Fatalf("healthy pod disturbed: %s", dump(h))
	}
}

func TestRestartedAgentAdoptsAndCleansOrphans(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	a.create(a.pod("keeper", func(p *corev1.Pod) {
		p.Spec.Containers[0].ReadinessProbe = httpProbe("/readyz", 1, 1)
	}))
	a.create(a.pod("doomed", nil))
	keeper := a.wait("keeper", "Ready", ready)
	doomed := a.wait("doomed", "Ready", ready)
	id := containerID(keeper, "app")

	a.stop()
	// While the agent is down, one pod is force-deleted.
	zero := int64(0)
	if err := a.hub.Client.CoreV1().Pods("default").Delete(context.Background(), "doomed", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	rv := mustGet(t, a, "keeper").ResourceVersion
	a.start()

	// The orphan is stopped and removed.
	a.eventually("orphan removed", func() error {
		if cs, _ := a.rt.ListContainers(context.Background(), runtimeFilter(doomed)); len(cs) > 0 {
			return fmt.Errorf("%d containers of the deleted pod left", len(cs))
		}
		if sb, err := a.rt.GetSandbox(context.Background(), string(doomed.UID)); err == nil {
			return fmt.Errorf("sandbox %s left", sb.ID)
		}
		return nil
	})
	// The running pod is adopted: same container, no restart, still Ready,
	// and its status needs no rewrite.
	time.Sleep(a.cfg.ResyncInterval)
	k := mustGet(t, a, "keeper")
	if containerID(k, "app") != id || cstatus(k, "app").RestartCount != 0 || ready(k) != nil {
		t.Fatalf("keeper after agent restart: %s", dump(k))
	}
	if k.ResourceVersion != rv {
		t.Errorf("adopting rewrote the status: %s", dump(k))
	}
	if n := a.k.PodCounts(); n.Desired != 1 || n.Running != 1 {
		t.Fatalf("PodCounts = %+v", n)
	}
}

// cgroupValue reads a cgroup file of a container from the host.
func cgroupValue(path, v2, v1 string) string {
	for _, f := range []string{"/sys/fs/cgroup" + path + "/" + v2, "/sys/fs/cgroup/" + strings.Split(v1, "/")[0] + path + "/" + strings.Split(v1, "/")[1]} {
		if b, err := os.ReadFile(f); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}
