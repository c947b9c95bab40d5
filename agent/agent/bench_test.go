package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/test/testimage"
)

// counting counts the requests the agent sends the hub, the bytes of their
// bodies and the bytes of their answers.
type counting struct {
	next                  http.RoundTripper
	requests, sent, bytes atomic.Int64
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	// client-go sends every body from memory, with its length set.
	if r.ContentLength > 0 {
		c.sent.Add(r.ContentLength)
	}
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

// away is how long the hub stays unreachable before the reconnect is
// measured: 10 minutes, as a shop's WAN link may be lost, unless
// FLOTILLA_AWAY says otherwise (a shorter run while working on it).
func away(b *testing.B) time.Duration {
	v := os.Getenv("FLOTILLA_AWAY")
	if v == "" {
		return 10 * time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("FLOTILLA_AWAY=%q: want a duration such as 10m", v)
	}
	return d
}

// BenchmarkAutonomy measures what the edge cares about (make bench runs
// it once): from an agent start without the hub to every cached pod
// Ready; from a power cut to the Service answering again; and what a
// device that was away from its hub for 10 minutes (restarted and
// rebooted meanwhile) costs the hub when it comes back.
func BenchmarkAutonomy(b *testing.B) {
	const pods = 5
	gone := away(b)
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
	hubGone := time.Now()
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

	// The hub comes back after the device has been away from it for
	// the whole window: what the reconnect costs, until the device is
	// settled (the hub has the statuses of the containers the device
	// runs since the power cut, and every pod Ready), 10 s more.
	if rest := gone - time.Since(hubGone); rest > 0 {
		time.Sleep(rest)
	}
	wire.requests.Store(0)
	wire.sent.Store(0)
	wire.bytes.Store(0)
	d.hub = d.hub.Restart()
	waitFor(b, "the hub to see every pod's current container ready", 5*time.Minute, func() bool {
		running := d.runningContainers()
		l, err := d.hub.Client.CoreV1().Pods("default").List(bg, metav1.ListOptions{})
		if err != nil || len(l.Items) != pods {
			return false
		}
		for _, p := range l.Items {
			cs := p.Status.ContainerStatuses
			if len(cs) != 1 || !cs[0].Ready || running[p.Name] == "" || cs[0].ContainerID != "containerd://"+running[p.Name] {
				return false
			}
		}
		return true
	})
	time.Sleep(10 * time.Second)
	b.ReportMetric(gone.Minutes(), "min-away")
	b.ReportMetric(float64(wire.requests.Load()), "reconnect-requests")
	b.ReportMetric(float64(wire.sent.Load())/1024, "reconnect-sent-KiB")
	b.ReportMetric(float64(wire.bytes.Load())/1024, "reconnect-read-KiB")
	b.StopTimer()

	for i := range pods {
		d.deletePod("default", fmt.Sprintf("web-%d", i))
	}
	waitFor(b, "the device empty", 60*time.Second, func() bool { return len(d.pods()) == 0 })
}
