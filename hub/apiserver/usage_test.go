package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/apiserver"
	"flotilla.dev/flotilla/hub/hubtest"
)

func metricsAs(t *testing.T, h *hubtest.Hub, user string, groups ...string) metricsclient.Interface {
	t.Helper()
	cert, key, err := h.PKI().IssueClientCert(user, groups, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return metricsclient.NewForConfigOrDie(&rest.Config{Host: h.URL(),
		TLSClientConfig: rest.TLSClientConfig{CAData: h.PKI().CACertPEM(), CertData: cert, KeyData: key}})
}

func postUsage(ctx context.Context, c kubernetes.Interface, rep agentapi.UsageReport) error {
	body, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	return c.CoreV1().RESTClient().Post().AbsPath(agentapi.PathUsage).SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
}

func TestMetricsAPIServesTheDevicesReports(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	for _, n := range []string{"dev1", "dev2"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"site": n}}}
		if _, err := h.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []struct{ name, node, app string }{{"web", "dev1", "web"}, {"db", "dev1", "db"}, {"elsewhere", "dev2", "web"}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "default", Labels: map[string]string{"app": p.app}},
			Spec: corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "c", Image: "example.com/app@sha256:" + strings.Repeat("a", 64)}}}}
		if _, err := h.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fs := uint64(8192)
	rep := agentapi.UsageReport{Time: time.Now(), WindowMS: 60000, IntervalS: 60, CPU: 250e6, Memory: 300 << 20, MemoryTotal: 1 << 30,
		Filesystems: []agentapi.FilesystemUsage{{Name: "data", Capacity: 100 << 30, Available: 5 << 30}},
		Pods: []agentapi.PodUsage{
			{Namespace: "default", Name: "web", Containers: []agentapi.ContainerUsage{{Name: "c", CPU: 1e6, Memory: 20 << 20, FS: &fs}, {Name: "side", CPU: 5e5, Memory: 1 << 20}}},
			{Namespace: "default", Name: "db", Containers: []agentapi.ContainerUsage{{Name: "c", CPU: 3e6, Memory: 50 << 20}}},
			// dev1 does not run this one: its figures are not taken.
			{Namespace: "default", Name: "elsewhere", Containers: []agentapi.ContainerUsage{{Name: "c", CPU: 9e9, Memory: 1}}},
		}}
	dev1 := h.NodeClient("dev1")
	if err := postUsage(ctx, dev1, rep); err != nil {
		t.Fatalf("dev1 reporting: %v", err)
	}
	// A report is the sender's own; people do not report.
	if err := postUsage(ctx, h.Client, rep); !apierrors.IsForbidden(err) {
		t.Errorf("an admin's report: %v, want Forbidden", err)
	}
	bad := rep
	bad.WindowMS = 0
	if err := postUsage(ctx, dev1, bad); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "w (the window in milliseconds)") {
		t.Errorf("a report without a window: %v, want BadRequest naming w", err)
	}

	// What devices write is counted, for make bench and operators.
	raw, err := h.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(rep)
	for _, want := range []string{"flotilla_apiserver_usage_reports_total 1\n", fmt.Sprintf("flotilla_apiserver_usage_report_bytes_total %d\n", len(body))} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the hub's /metrics lacks %q", want)
		}
	}

	admin := metricsAs(t, h, "alice", apiserver.GroupAdmins)
	groups, err := admin.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range groups.Groups {
		found = found || (g.Name == "metrics.k8s.io" && g.PreferredVersion.Version == "v1beta1")
	}
	if !found {
		t.Errorf("discovery has no metrics.k8s.io/v1beta1: %+v", groups.Groups)
	}
	res, err := admin.Discovery().ServerResourcesForGroupVersion("metrics.k8s.io/v1beta1")
	if err != nil || len(res.APIResources) != 2 {
		t.Errorf("metrics.k8s.io/v1beta1 resources: %+v, %v", res, err)
	}

	// The hub's cache follows the store's write of the report.
	var nodes *metricsv1beta1.NodeMetricsList
	deadline := time.Now().Add(10 * time.Second)
	for {
		nodes, err = admin.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(nodes.Items) != 1 || nodes.Items[0].Name != "dev1" {
		t.Fatalf("node metrics = %+v, want dev1's only (dev2 never reported)", nodes.Items)
	}
	nm := nodes.Items[0]
	if cpu, mem := nm.Usage.Cpu(), nm.Usage.Memory(); cpu.MilliValue() != 250 || mem.Value() != 300<<20 || nm.Window.Duration != time.Minute || nm.Labels["site"] != "dev1" {
		t.Errorf("dev1: cpu %v, memory %v, window %v, labels %v; want 250m, 300Mi, 1m, site=dev1", cpu, mem, nm.Window, nm.Labels)
	}
	var gotFS []agentapi.FilesystemUsage
	if err := json.Unmarshal([]byte(nm.Annotations[agentapi.AnnotationFilesystems]), &gotFS); err != nil || len(gotFS) != 1 || gotFS[0].Available != 5<<30 {
		t.Errorf("filesystems annotation %q: %v", nm.Annotations[agentapi.AnnotationFilesystems], err)
	}
	if l, err := admin.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{LabelSelector: "site=dev2"}); err != nil || len(l.Items) != 0 {
		t.Errorf("node metrics with site=dev2: %+v, %v; want none", l, err)
	}
	if _, err := admin.MetricsV1beta1().NodeMetricses().Get(ctx, "dev2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("dev2's node metrics: %v, want NotFound", err)
	}

	pods, err := admin.MetricsV1beta1().PodMetricses("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Name != "web" || len(pods.Items[0].Containers) != 2 {
		t.Fatalf("pod metrics app=web = %+v, want web with two containers (elsewhere is not dev1's)", pods.Items)
	}
	if c := pods.Items[0].Containers[0]; c.Name != "c" || c.Usage.Cpu().MilliValue() != 1 || c.Usage.Memory().Value() != 20<<20 {
		t.Errorf("web's container c = %+v", c)
	}
	if all, err := admin.MetricsV1beta1().PodMetricses("").List(ctx, metav1.ListOptions{}); err != nil || len(all.Items) != 2 {
		t.Errorf("pod metrics of every namespace: %+v, %v; want web and db", all, err)
	}
	if pm, err := admin.MetricsV1beta1().PodMetricses("default").Get(ctx, "db", metav1.GetOptions{}); err != nil || pm.Containers[0].Usage.Cpu().MilliValue() != 3 {
		t.Errorf("db's pod metrics: %+v, %v", pm, err)
	}
	if _, err := admin.MetricsV1beta1().PodMetricses("default").Get(ctx, "elsewhere", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("elsewhere's pod metrics: %v, want NotFound", err)
	}

	// Read like pods and nodes: viewers may, devices may not.
	viewer := metricsAs(t, h, "vera", "flotilla:viewers")
	if l, err := viewer.MetricsV1beta1().PodMetricses("default").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 2 {
		t.Errorf("a viewer's pod metrics: %+v, %v", l, err)
	}
	device := metricsAs(t, h, agentapi.NodeUser("dev1"), agentapi.NodesGroup)
	if _, err := device.MetricsV1beta1().PodMetricses("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `"pods" in API group "metrics.k8s.io"`) {
		t.Errorf("a device's pod metrics: %v, want Forbidden naming pods in metrics.k8s.io", err)
	}
	if _, err := admin.MetricsV1beta1().PodMetricses("default").Watch(ctx, metav1.ListOptions{}); err == nil {
		t.Error("a watch of pod metrics was accepted")
	}
}
