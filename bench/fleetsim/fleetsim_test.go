package fleetsim

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/controllers/manager"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/internal/testenv"
)

// TestSmallFleet runs 24 simulated devices on 3 sites against a hub with
// its controllers: each joins with its own identity, a DaemonSet's pod
// reaches each device's watch and is reported Ready, and each device
// holds the Service and only its own site's EndpointSlices.
func TestSmallFleet(t *testing.T) {
	testenv.Integration(t, "runs a hub and 24 simulated devices")
	h := hubtest.Start(t, hubtest.Options{Loops: []hub.Loop{{Name: "controllers", Run: func(ctx context.Context, cfg *rest.Config) error {
		return manager.Run(ctx, cfg, manager.Options{})
	}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, err := Start(ctx, Options{Admin: h.Config, Devices: 24, Sites: 3, DataDir: t.TempDir(), LeaseInterval: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if err := f.WaitWatching(ctx); err != nil {
		t.Fatal(err)
	}
	// Each device talks to the hub through its tunnel, as an agent does.
	raw, err := h.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "\nflotilla_apiserver_tunnels 24\n") {
		t.Errorf("the hub's metrics do not count 24 open tunnels, one a device")
	}

	sel := map[string]string{"app": "kiosk"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kiosk", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: sel},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kiosk", Image: "registry.example/kiosk@sha256:" + fmt.Sprintf("%064d", 1),
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		}}}
	if _, err := h.Client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kiosk"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		d, err := h.Client.AppsV1().DaemonSets("default").Get(ctx, "kiosk", metav1.GetOptions{})
		if err == nil && d.Status.NumberReady == 24 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DaemonSet status %+v (%v), want 24 ready", d.Status, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pods, err := h.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: labels.Set(sel).String()})
	if err != nil {
		t.Fatal(err)
	}
	onNode := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		onNode[p.Spec.NodeName] = p
	}
	for _, d := range f.Devices() {
		p, ok := onNode[d.Name()]
		if !ok {
			t.Fatalf("no pod on %s", d.Name())
		}
		if _, saw := d.SawPod(p.UID); !saw || d.Pods() != 1 {
			t.Errorf("%s saw its pod: %v, %d pods in all (want 1: only its own)", d.Name(), saw, d.Pods())
		}
	}
	// The Service's slices, as each device holds them: its site's only;
	// and every Service.
	svcs, err := h.Client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		bad := ""
		for _, d := range f.Devices() {
			sites := d.SliceSites()
			if len(sites) != 1 || sites[d.Site()] != 1 || d.Services() != len(svcs.Items) {
				bad = fmt.Sprintf("%s (site %s) holds slices of sites %v and %d Services, want one slice of its own site and %d Services", d.Name(), d.Site(), sites, d.Services(), len(svcs.Items))
				break
			}
		}
		if bad == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(bad)
		}
	}
	// Every device renews its Lease (every 2 s here).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		l, err := h.Client.CoordinationV1().Leases(api.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fresh := 0
		for _, le := range l.Items {
			if le.Spec.RenewTime != nil && time.Since(le.Spec.RenewTime.Time) < 5*time.Second {
				fresh++
			}
		}
		if fresh == 24 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 24 Leases renewed in the last 5 s", fresh)
		}
	}
}

func TestLoopbackAddrsAreDistinct(t *testing.T) {
	seen := map[netip.Addr]int{}
	for i := range 200_000 {
		a := loopbackAddr(i)
		if !a.Is4() || !a.IsLoopback() {
			t.Fatalf("device %d: %s is not an IPv4 loopback address", i, a)
		}
		if b := a.As4(); b[2] == 0 || b[3] == 0 || b[3] == 255 {
			t.Fatalf("device %d: %s", i, a)
		}
		if j, ok := seen[a]; ok {
			t.Fatalf("devices %d and %d both connect from %s", j, i, a)
		}
		seen[a] = i
	}
}
