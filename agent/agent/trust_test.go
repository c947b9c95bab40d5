package agent

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/controllers/manager"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/registry/trust/trusttest"
	"flotilla.dev/flotilla/test/testimage"
)

// TestImageTrust runs a device whose trust dir holds one key: an image
// signed by it runs, an unsigned one and one signed by another key wait
// with ErrImageSignature and leave nothing in containerd, and the signed
// one restarts from its cached verdict with the registry gone.
func TestImageTrust(t *testing.T) {
	cosign := trusttest.Cosign(t)
	d := newTestDevice(t, daemonSetsOnly())
	proxy := trusttest.NewProxy(t, testimage.SharedRegistry(t).Host)
	reg := &testimage.Registry{Host: proxy.Host}
	build := func(name string) string {
		img, err := testimage.BuildImage(reg, name, testimage.AppPackage, testimage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return img.Ref
	}
	signed, unsigned, foreign := build("trust/signed"), build("trust/unsigned"), build("trust/foreign")
	next := build("trust/next")
	trusted := cosign.GenerateKeyPair(t, "trusted")
	cosign.GenerateKeyPair(t, "other")
	cosign.Sign(t, "trusted", signed, trusttest.Legacy)
	cosign.Sign(t, "other", foreign, trusttest.Legacy)
	trusttest.InstallKey(t, trusted, d.cfg.TrustDir, "trusted.pub")
	d.start()
	d.assignPodCIDR("10.88.13.0/24")

	bg := context.Background()
	pods := d.hub.Client.CoreV1().Pods("default")
	for name, img := range map[string]string{"signed": signed, "unsigned": unsigned, "foreign": foreign} {
		d.sleeper(name, img, nil)
	}
	state := func(name string) *corev1.ContainerStatus {
		p, err := pods.Get(bg, name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) != 1 {
			return nil
		}
		return &p.Status.ContainerStatuses[0]
	}
	waitFor(t, "the signed image running", 120*time.Second, func() bool {
		s := state("signed")
		return s != nil && s.State.Running != nil
	})
	for name, why := range map[string]string{"unsigned": "no signature", "foreign": "unknown key"} {
		waitFor(t, name+" refused", 60*time.Second, func() bool {
			s := state(name)
			return s != nil && s.State.Waiting != nil && s.State.Waiting.Reason == "ErrImageSignature" &&
				strings.Contains(s.State.Waiting.Message, why)
		}, func() string { return name + ": " + stateString(state(name)) })
	}
	client, _ := testimage.Containerd(t)
	ctx := namespaces.WithNamespace(bg, d.ns)
	for _, img := range []string{unsigned, foreign} {
		ref, err := registry.ParseReference(img)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.GetImage(ctx, ref.PullName()); !errdefs.IsNotFound(err) {
			t.Errorf("refused image %s is in containerd: %v", img, err)
		}
	}

	prepull(t, d, cosign, signed, next)

	// The registry goes away: the signed image's container restarts from
	// its cached verdict.
	proxy.Close()
	ctr, err := client.LoadContainer(ctx, runtime.ContainerID(string(mustUID(t, pods, "signed")), "app", 0))
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
	waitFor(t, "the signed image restarted without its registry", 120*time.Second, func() bool {
		s := state("signed")
		return s != nil && s.State.Running != nil && s.RestartCount == 1
	}, func() string { return stateString(state("signed")) })

	for _, name := range []string{"signed", "unsigned", "foreign"} {
		d.deletePod("default", name)
	}
	waitFor(t, "the device empty", 60*time.Second, func() bool { return len(d.pods()) == 0 })
}

// prepull rolls a DaemonSet with flotilla.dev/prepull from the signed
// image to next, which is not signed yet: the device refuses to pull it
// and its old pod keeps running, untouched; once next is signed the
// device pulls it and only then is the old pod replaced.
func prepull(t *testing.T, d *testDevice, cosign *trusttest.CLI, signed, next string) {
	bg := context.Background()
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kiosk", Namespace: "default", Annotations: map[string]string{api.AnnotationPrepull: "true"}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kiosk"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "kiosk"}},
				Spec: corev1.PodSpec{
					HostNetwork: true, TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{Name: "app", Image: signed, Args: []string{"sleep", "1h"}}},
				},
			},
		},
	}
	dss := d.hub.Client.AppsV1().DaemonSets("default")
	if _, err := dss.Create(bg, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := d.hub.Client.CoreV1().Pods("default")
	kiosk := func() (*corev1.Pod, string) {
		list, err := pods.List(bg, metav1.ListOptions{LabelSelector: "app=kiosk"})
		if err != nil || len(list.Items) != 1 {
			return nil, fmt.Sprintf("%d kiosk pods, %v", len(list.Items), err)
		}
		p := &list.Items[0]
		return p, fmt.Sprintf("%s %s %v", p.Name, p.Status.Phase, p.Status.Conditions)
	}
	running := func(image string) func() bool {
		return func() bool {
			p, _ := kiosk()
			return p != nil && p.Spec.Containers[0].Image == image && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
		}
	}
	show := func() string { _, s := kiosk(); return s }
	waitFor(t, "the kiosk running the signed image", 120*time.Second, running(signed), show)
	old, _ := kiosk()

	// The controller writes the DaemonSet's status meanwhile: read again
	// on a conflict, as kubectl does.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := dss.Get(bg, "kiosk", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Template.Spec.Containers[0].Image = next
		_, err = dss.Update(bg, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	prepulled := func(status corev1.ConditionStatus, reason string) func() bool {
		return func() bool {
			p, _ := kiosk()
			if p == nil || p.UID != old.UID {
				return false
			}
			for _, c := range p.Status.Conditions {
				if c.Type == api.ConditionImagesPrepulled {
					return c.Status == status && c.Reason == reason
				}
			}
			return false
		}
	}
	waitFor(t, "the unsigned next image refused while the old pod runs", 60*time.Second, prepulled(corev1.ConditionFalse, "ErrImageSignature"), show)
	if p, _ := kiosk(); p.UID != old.UID || p.Status.ContainerStatuses[0].RestartCount != 0 || !p.Status.ContainerStatuses[0].Ready {
		t.Fatalf("the old pod was disturbed: %s", show())
	}

	cosign.Sign(t, "trusted", next, trusttest.Legacy)
	waitFor(t, "the kiosk replaced once next was pulled", 120*time.Second, func() bool {
		p, _ := kiosk()
		return p != nil && p.UID != old.UID && running(next)()
	}, show)
	if err := dss.Delete(bg, "kiosk", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p, _ := kiosk()
	d.deletePod("default", p.Name)
}

// daemonSetsOnly runs the hub's DaemonSet controller and scheduler.
func daemonSetsOnly() hubtest.Options {
	return hubtest.Options{Loops: []hub.Loop{{Name: "controllers", Run: func(ctx context.Context, cfg *rest.Config) error {
		return manager.Run(ctx, cfg, manager.Options{Disable: []string{
			manager.Deployment, manager.ReplicaSet, manager.EndpointSlice, manager.GarbageCollector, manager.NodeLifecycle,
		}})
	}}}}
}

func mustUID(t *testing.T, pods interface {
	Get(context.Context, string, metav1.GetOptions) (*corev1.Pod, error)
}, name string) string {
	p, err := pods.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}

func stateString(s *corev1.ContainerStatus) string {
	if s == nil {
		return "no status"
	}
	return s.String()
}
