package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/test/testimage"
)

// counting counts the requests the agent sends the hub and the bytes of
// their answers.
type counting struct {
	next            http.RoundTripper
	requests, bytes atomic.Int64
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.bytes}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// BenchmarkAutonomy measures what the edge cares about (make bench runs
// it once): from an agent start without the hub to every cached pod
// Ready; from a power cut to the Service answering again; and what a
// device costs the hub when it comes back.
func BenchmarkAutonomy(b *testing.B) {
	const pods = 5
	d := newTestDevice(b, endpointSlicesOnly())
	var wire counting
	creds := d.cfg.Credentials
	d.cfg.Credentials = func(ctx context.Context) (*rest.Config, error) {
		c, err := creds(ctx)
		if err == nil {
			c.Wrap(func(rt http.RoundTripper) http.RoundTripper { wire.next = rt; return &wire })
		}
		return c, err
	}
	d.start()
	d.assignPodCIDR("10.88.14.0/24")
	bg := context.Background()
	svc := d.webService()
	for i := range pods {
		d.sleeper(fmt.Sprintf("web-%d", i), d.img, func(p *corev1.Pod) {
			webServer(p)
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}}
		})
	}
	view := DeviceView{DataDir: d.cfg.DataDir, ManifestsDir: d.cfg.ManifestsDir, NodeName: d.name,
		ContainerdAddress: testimage.ContainerdSocket, ContainerdNamespace: d.ns, LoggerPath: d.cfg.LoggerPath}
	allReady := func() bool {
		rep, err := DevicePods(bg, view)
		if err != nil || !rep.Live || len(rep.Pods) != pods {
			return false
		}
		for _, p := range rep.Pods {
			if !p.Ready {
				return false
			}
		}
		return true
	}
	url := "http://" + svc.Spec.ClusterIP + ":80/"
	answers := func() bool { _, err := d.get(url); return err == nil }
	waitFor(b, "every pod ready and the Service answering", 120*time.Second, func() bool { return allReady() && answers() })
	b.ResetTimer()

	// The agent restarts with the hub away.
	d.stop()
	d.hub.Stop()
	start := time.Now()
	d.start()
	waitFor(b, "every cached pod Ready", 120*time.Second, allReady)
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms-start-to-cached-pods-ready")

	// A power cut, the hub still away.
	d.stop()
	d.powerCut()
	start = time.Now()
	d.start()
	waitFor(b, "the Service answering after the reboot", 120*time.Second, answers)
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms-reboot-to-service-answering")

	// The hub comes back: what the device's reconnect costs it, until the
	// device is settled (its pods Ready on the hub, 10 s more).
	wire.requests.Store(0)
	wire.bytes.Store(0)
	d.hub = d.hub.Restart()
	waitFor(b, "the hub to see every pod ready", 120*time.Second, func() bool {
		l, err := d.hub.Client.CoreV1().Pods("default").List(bg, metav1.ListOptions{})
		if err != nil || len(l.Items) != pods {
			return false
		}
		for _, p := range l.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status != corev1.ConditionTrue {
					return false
				}
			}
		}
		return true
	})
	time.Sleep(10 * time.Second)
	b.ReportMetric(float64(wire.requests.Load()), "reconnect-requests")
	b.ReportMetric(float64(wire.bytes.Load())/1024, "reconnect-KiB")
	b.StopTimer()

	for i := range pods {
		d.deletePod("default", fmt.Sprintf("web-%d", i))
	}
	waitFor(b, "the device empty", 60*time.Second, func() bool { return len(d.pods()) == 0 })
}
