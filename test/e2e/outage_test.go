package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	corev1 "k8s.io/api/core/v1"

	"flotilla.dev/flotilla/test/testimage"
)

// outage is how long the hub stays dead: 60 s in make test, longer in
// make soak (FLOTILLA_OUTAGE=10m).
func outage(t *testing.T) time.Duration {
	if v := os.Getenv("FLOTILLA_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("FLOTILLA_OUTAGE=%q: want a duration such as 10m", v)
		}
		return d
	}
	return 60 * time.Second
}

// TestHubOutageUnderTraffic kills the hub while a client on one device
// sends requests through a Service to backends on both devices, and,
// while the hub is away, kills the agent of the other device too. The
// devices must not notice: no failed request, no container restarted,
// also when the agent and the hub come back.
func TestHubOutageUnderTraffic(t *testing.T) {
	down := outage(t)
	f := startFleet(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute+2*down)
	defer cancel()

	image := f.image("testapp", testimage.AppPackage)
	if _, err := f.cs.AppsV1().Deployments("default").Create(ctx, echoDeployment(image, 2, "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := f.cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]string{} // pod -> container ID
	waitFor(t, "2 ready echo pods", 3*time.Minute, func() (bool, error) {
		clear(before)
		for _, p := range f.podsOf(ctx, "default", "app=echo") {
			if ready(&p) && len(p.Status.ContainerStatuses) == 1 {
				before[p.Name] = p.Status.ContainerStatuses[0].ContainerID
			}
		}
		return len(before) == 2, nil
	})

	done := f.runClientAsync(ctx, "client-outage", "dev2", "-urls", "http://"+svc.Spec.ClusterIP+"/",
		"-duration", (down + 30*time.Second).String(), "-interval", "20ms")
	waitFor(t, "the client to run", 2*time.Minute, func() (bool, error) {
		p, err := f.cs.CoreV1().Pods("default").Get(ctx, "client-outage", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
	time.Sleep(5 * time.Second)

	restartHub := f.kill("hub", "")
	t.Logf("hub killed; back in %s", down)
	time.Sleep(down / 4)
	restartAgent := f.kill("dev1", f.prefix+"-dev1")
	time.Sleep(5 * time.Second)
	restartAgent()
	t.Logf("dev1's agent killed with SIGKILL and started again, the hub still away")
	time.Sleep(down - down/4 - 5*time.Second)
	restartHub()

	s := <-done
	t.Logf("figure: hub outage of %s under load: %d requests answered, %d failed", down, s.OK, s.Failed)
	if s.Failed > 0 {
		t.Errorf("%d requests failed while the hub was away: %v", s.Failed, s.Errors)
	}
	if s.OK == 0 {
		t.Error("the client got no answer at all")
	}
	for _, p := range f.podsOf(ctx, "default", "app=echo") {
		id, ok := before[p.Name]
		if !ok {
			t.Errorf("pod %s is new: the hub's return replaced a pod", p.Name)
			continue
		}
		cs := p.Status.ContainerStatuses
		if len(cs) != 1 || cs[0].ContainerID != id || cs[0].RestartCount != 0 {
			t.Errorf("pod %s: container %v, want %s with 0 restarts", p.Name, cs, id)
		}
	}
}

// kill kills the demo's process name ("hub", "dev1") with SIGKILL, as a
// crash would, and returns a function that starts it again as the demo
// did: with the same command line, in netns when it is not "".
func (f *fleet) kill(name, netns string) (restart func()) {
	f.t.Helper()
	pidFile := filepath.Join(f.dir, name+".pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		f.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		f.t.Fatal(err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		f.t.Fatal(err)
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if !strings.Contains(args[0], "flotilla-") {
		f.t.Fatalf("pid %d in %s is %v, not Flotilla's", pid, pidFile, args)
	}
	if netns != "" {
		args = append([]string{"nsenter", "--net=/run/netns/" + netns}, args...)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		f.t.Fatal(err)
	}
	for syscall.Kill(pid, 0) == nil {
		time.Sleep(50 * time.Millisecond)
	}
	return func() {
		f.t.Helper()
		log, err := os.OpenFile(filepath.Join(f.dir, name+".log"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			f.t.Fatal(err)
		}
		defer log.Close()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			f.t.Fatal(err)
		}
		// demo.sh down stops it through the pid file.
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
			f.t.Fatal(err)
		}
		go cmd.Wait()
	}
}

// TestDevicePartition cuts one device off the network past the grace
// period. The hub marks it NotReady and the other device drops its
// endpoint; its pods, which would be evicted at once (tolerationSeconds
// 0), stay because an admin gave it autonomy; back on the network it is
// Ready again and no container restarted.
func TestDevicePartition(t *testing.T) {
	f := startFleet(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if _, err := f.cs.CoreV1().Nodes().Patch(ctx, "dev1", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"node.flotilla.dev/autonomy":"true"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	d := echoDeployment(f.image("testapp", testimage.AppPackage), 2, "1")
	d.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
		Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](0)}}
	if _, err := f.cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var victim corev1.Pod
	waitFor(t, "a ready echo pod on each device", 3*time.Minute, func() (bool, error) {
		nodes := map[string]bool{}
		for _, p := range f.podsOf(ctx, "default", "app=echo") {
			if ready(&p) {
				nodes[p.Spec.NodeName] = true
				if p.Spec.NodeName == "dev1" {
					victim = p
				}
			}
		}
		return len(nodes) == 2, nil
	})
	id := victim.Status.ContainerStatuses[0].ContainerID
	ip := victim.Status.PodIP
	// The check below that the endpoint leaves means something only if
	// it was there.
	waitFor(t, "dev2's rules to carry dev1's endpoint", time.Minute, func() (bool, error) {
		out, err := f.inDevice(2, "iptables-save", "-t", "nat")
		return err == nil && strings.Contains(out, "--to-destination "+ip+":"), err
	})

	link := f.prefix[:4] + "v1h" // dev1's end of its link, on the host
	if out, err := exec.Command("ip", "link", "set", link, "down").CombinedOutput(); err != nil {
		t.Fatalf("cutting dev1 off: %v\n%s", err, out)
	}
	cut := time.Now()
	defer exec.Command("ip", "link", "set", link, "up").Run()
	waitFor(t, "dev1 NotReady", 3*time.Minute, func() (bool, error) {
		n, err := f.cs.CoreV1().Nodes().Get(ctx, "dev1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status != corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	t.Logf("figure: dev1 NotReady %v after the cut", time.Since(cut).Round(time.Second))
	waitFor(t, "dev2's rules to drop dev1's endpoint", time.Minute, func() (bool, error) {
		out, err := f.inDevice(2, "iptables-save", "-t", "nat")
		return err == nil && !strings.Contains(out, "--to-destination "+ip+":"), err
	})
	// Past the moment a pod without autonomy would have been evicted.
	time.Sleep(10 * time.Second)
	p, err := f.cs.CoreV1().Pods("default").Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("dev1's pod was evicted under autonomy: %v, deletion %v", err, p.DeletionTimestamp)
	}

	if out, err := exec.Command("ip", "link", "set", link, "up").CombinedOutput(); err != nil {
		t.Fatalf("reconnecting dev1: %v\n%s", err, out)
	}
	waitFor(t, "dev1's pod Ready again", 3*time.Minute, func() (bool, error) {
		p, err := f.cs.CoreV1().Pods("default").Get(ctx, victim.Name, metav1.GetOptions{})
		return err == nil && ready(p), err
	})
	p, err = f.cs.CoreV1().Pods("default").Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].ContainerID != id || cs[0].RestartCount != 0 {
		t.Errorf("dev1's pod after the partition: %v, want container %s with 0 restarts", cs, id)
	}
	defer func() {
		if !t.Failed() {
			return
		}
		n, _ := f.cs.CoreV1().Nodes().Get(ctx, "dev1", metav1.GetOptions{})
		t.Logf("dev1: conditions %+v taints %+v", n.Status.Conditions, n.Spec.Taints)
		p, _ := f.cs.CoreV1().Pods("default").Get(ctx, victim.Name, metav1.GetOptions{})
		t.Logf("pod: %+v", p.Status.Conditions)
		sl, _ := f.cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{})
		for _, s := range sl.Items {
			t.Logf("slice %s: %+v", s.Name, s.Endpoints)
		}
	}()
	waitFor(t, "dev2's rules to take dev1's endpoint back", time.Minute, func() (bool, error) {
		out, err := f.inDevice(2, "iptables-save", "-t", "nat")
		return err == nil && strings.Contains(out, "--to-destination "+ip+":"), err
	})
}
