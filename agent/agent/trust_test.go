package agent

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/agent/runtime"
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
	d := newTestDevice(t)
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
