package agent

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/hub/store/etcdstore/etcdtest"
)

// TestHubFailover runs a device against two hubs sharing an etcd, given
// both URLs: when the hub it talks to dies, the device goes on through
// the other — its Lease is renewed, a pod created through the other hub
// starts — and the pod it already ran is not restarted.
func TestHubFailover(t *testing.T) {
	etcd := etcdtest.Start(t, t.TempDir())
	opts := hubtest.Options{Store: hub.StoreEtcd, Etcd: hub.EtcdConfig{Endpoints: []string{etcd.URL}}}
	d := newTestDevice(t, opts)
	opts.DataDir = d.hub.PeerDataDir()
	other := hubtest.Start(t, opts)
	d.cfg.Credentials = KubeconfigCredentials(d.hub.KubeconfigPath(), d.hub.URL(), other.URL())
	d.start()
	d.assignPodCIDR("10.88.14.0/24")

	bg := context.Background()
	d.sleeper("before", d.img, nil)
	running := func(name string) func() bool {
		return func() bool {
			p, err := other.Client.CoreV1().Pods("default").Get(bg, name, metav1.GetOptions{})
			return err == nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
		}
	}
	waitFor(t, "the first pod running", 120*time.Second, running("before"))
	first, _ := other.Client.CoreV1().Pods("default").Get(bg, "before", metav1.GetOptions{})

	d.hub.Stop()
	stopped := time.Now()
	leases := other.Client.CoordinationV1().Leases(api.NamespaceNodeLease)
	waitFor(t, "the Lease renewed through the other hub", 90*time.Second, func() bool {
		l, err := leases.Get(bg, d.name, metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(stopped)
	})
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "after", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: d.name, HostNetwork: true, TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "app", Image: d.img, Args: []string{"sleep", "1h"}}}},
	}
	if _, err := other.Client.CoreV1().Pods("default").Create(bg, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a pod created through the other hub running", 120*time.Second, running("after"))
	now, err := other.Client.CoreV1().Pods("default").Get(bg, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if was, is := first.Status.ContainerStatuses[0], now.Status.ContainerStatuses[0]; is.RestartCount != 0 || is.ContainerID != was.ContainerID || is.State.Running == nil {
		t.Fatalf("the first pod was disturbed by the failover: %s -> %s", stateString(&was), stateString(&is))
	}

	d.hub = other // cleanup deletes through the hub that is up
	for _, name := range []string{"before", "after"} {
		d.deletePod("default", name)
	}
	waitFor(t, "the device empty", 60*time.Second, func() bool { return len(d.pods()) == 0 })
}
