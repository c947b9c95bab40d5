package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/store"
)

// Devices POST their usage to agentapi.PathUsage every interval; the hub
// keeps the last report of each in the store (usagePrefix + node: one
// small write per device per interval, nothing for a device that stays
// away), every hub's watch cache follows those keys as it follows the
// objects, and metrics.k8s.io/v1beta1 PodMetrics and NodeMetrics are
// served from them — so kubectl top answers from any hub sharing the
// store, and devices behind NAT need no connection from the hub.

// usagePrefix holds the last usage report of each device.
const usagePrefix = "/flotilla.dev/usage/"

// staleIntervals is how many report intervals a report stays current:
// a device that missed this many is shown without figures.
const staleIntervals = 3

// storedUsage is a device's last report as the hub keeps it, with the
// hub's time of receipt: staleness is judged on the hub's clock.
type storedUsage struct {
	Received time.Time            `json:"r"`
	Report   agentapi.UsageReport `json:"u"`
	pods     map[string]int       // namespace/name → index in Report.Pods
}

func decodeUsage(data []byte) (*storedUsage, error) {
	var u storedUsage
	if err := json.Unmarshal(data, &u); err != nil {
		return nil, err
	}
	u.pods = make(map[string]int, len(u.Report.Pods))
	for i, p := range u.Report.Pods {
		u.pods[p.Namespace+"/"+p.Name] = i
	}
	return &u, nil
}

// fresh says whether the report is still current at now.
func (u *storedUsage) fresh(now time.Time) bool {
	interval := time.Duration(u.Report.IntervalS) * time.Second
	return now.Sub(u.Received) <= staleIntervals*interval
}

// usageOf is the last usage report of a device, if it is still current.
func (s *Server) usageOf(node string) (*storedUsage, bool) {
	u := s.cache.usageOf(node)
	if u == nil || !u.fresh(s.now()) {
		return nil, false
	}
	return u, true
}

// serveUsageReport stores a device's report; the device is the one the
// client certificate names.
func (s *Server) serveUsageReport(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed,
			Reason: metav1.StatusReasonMethodNotAllowed, Message: fmt.Sprintf("%s takes POST, not %s", agentapi.PathUsage, r.Method)}}
	}
	u := UserFrom(r.Context())
	node, ok := "", false
	if u != nil && containsString(u.Groups, GroupNodes) {
		node, ok = strings.CutPrefix(u.Name, NodeUserPrefix)
	}
	if !ok || node == "" {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "usage"}, "",
			errors.New("only devices report usage: their certificate names them (system:node:NAME in group system:nodes)"))
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if len(body) > agentapi.MaxUsageReportBytes {
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("a usage report may have %d bytes, this one has %d", agentapi.MaxUsageReportBytes, len(body)))
	}
	var rep agentapi.UsageReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return badRequest("the body is not a usage report: %v", err)
	}
	if err := rep.Validate(); err != nil {
		return badRequest("usage report of %s: %v", node, err)
	}
	data, err := json.Marshal(storedUsage{Received: s.now().UTC(), Report: rep})
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	key := usagePrefix + node
	if _, err := s.store.Update(r.Context(), key, data, 0); errors.Is(err, store.ErrNotFound) {
		_, err = s.store.Create(r.Context(), key, data)
		if errors.Is(err, store.ErrExists) { // another hub stored one first
			_, err = s.store.Update(r.Context(), key, data, 0)
		}
		if err != nil {
			return toStatusError(err, nil, node)
		}
	} else if err != nil {
		return toStatusError(err, nil, node)
	}
	s.metrics.usageReports.Inc()
	s.metrics.usageBytes.Add(float64(len(body)))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// The metrics API's resources.
var (
	metricsGV       = metricsv1beta1.SchemeGroupVersion
	nodeMetricsRes  = &api.Resource{GVR: metricsGV.WithResource("nodes"), Kind: "NodeMetrics", ListKind: "NodeMetricsList", Singular: "nodemetrics"}
	podMetricsRes   = &api.Resource{GVR: metricsGV.WithResource("pods"), Kind: "PodMetrics", ListKind: "PodMetricsList", Singular: "podmetrics", Namespaced: true}
	metricsVerbs    = metav1.Verbs{"get", "list"}
	metricsResource = []*api.Resource{nodeMetricsRes, podMetricsRes}
)

// metricsRequest parses a path of metrics.k8s.io/v1beta1 (discovery
// aside): /nodes[/NAME], /pods, /namespaces/NS/pods[/NAME].
func metricsRequest(r *http.Request) (requestInfo, bool, error) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(r.URL.Path, "/"), "/apis/"+metricsGV.String()+"/")
	if !ok {
		return requestInfo{}, false, nil
	}
	parts := strings.Split(rest, "/")
	var ri requestInfo
	if parts[0] == "namespaces" && len(parts) >= 3 {
		ri.Namespace, parts = parts[1], parts[2:]
	}
	switch {
	case parts[0] == "nodes" && ri.Namespace == "":
		ri.Resource = nodeMetricsRes
	case parts[0] == "pods":
		ri.Resource = podMetricsRes
	default:
		return ri, true, notFoundPath(r)
	}
	switch len(parts) {
	case 1:
		ri.Verb = "list"
	case 2:
		ri.Verb, ri.Name = "get", parts[1]
	default:
		return ri, true, notFoundPath(r)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return ri, true, methodNotAllowed(ri.Resource, r.Method)
	}
	if isTrue(r.URL.Query().Get("watch")) {
		return ri, true, apierrors.NewMethodNotSupported(ri.Resource.GVR.GroupResource(), "watch")
	}
	return ri, true, nil
}

// serveMetrics answers a metrics.k8s.io request (authorized already).
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	if err := s.cache.waitFresh(r.Context()); err != nil {
		return err
	}
	f := &filter{namespace: ri.Namespace, name: ri.Name}
	q := r.URL.Query()
	var err error
	if f.labels, err = labels.Parse(q.Get("labelSelector")); err != nil {
		return badRequest("labelSelector %q: %v", q.Get("labelSelector"), err)
	}
	if f.fields, err = fields.ParseSelector(q.Get("fieldSelector")); err != nil {
		return badRequest("fieldSelector %q: %v", q.Get("fieldSelector"), err)
	}
	now := s.now()
	if ri.Resource == nodeMetricsRes {
		res, _ := api.ResourceFor(corev1.SchemeGroupVersion.WithResource("nodes"))
		nodes, _ := s.cache.list(res, f)
		list := &metricsv1beta1.NodeMetricsList{TypeMeta: metav1.TypeMeta{Kind: "NodeMetricsList", APIVersion: metricsGV.String()}}
		for _, co := range nodes {
			n := co.obj.(*corev1.Node)
			u, ok := s.usageOf(n.Name)
			if !ok {
				continue
			}
			meta := metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, CreationTimestamp: metav1.NewTime(now)}
			if len(u.Report.Filesystems) > 0 {
				fs, _ := json.Marshal(u.Report.Filesystems)
				meta.Annotations = map[string]string{agentapi.AnnotationFilesystems: string(fs)}
			}
			list.Items = append(list.Items, metricsv1beta1.NodeMetrics{
				ObjectMeta: meta,
				Timestamp:  metav1.NewTime(u.Received), Window: metav1.Duration{Duration: u.Report.Window()},
				Usage: usageList(u.Report.CPU, u.Report.Memory),
			})
		}
		return writeMetrics(w, ri, list, len(list.Items), func() any {
			i := list.Items[0]
			i.TypeMeta = metav1.TypeMeta{Kind: "NodeMetrics", APIVersion: metricsGV.String()}
			return &i
		})
	}
	res, _ := api.ResourceFor(corev1.SchemeGroupVersion.WithResource("pods"))
	pods, _ := s.cache.list(res, f)
	list := &metricsv1beta1.PodMetricsList{TypeMeta: metav1.TypeMeta{Kind: "PodMetricsList", APIVersion: metricsGV.String()}}
	for _, co := range pods {
		p := co.obj.(*corev1.Pod)
		if p.Spec.NodeName == "" {
			continue
		}
		u, ok := s.usageOf(p.Spec.NodeName)
		if !ok {
			continue
		}
		// A device reports only what it runs: the pod must be bound to it.
		i, ok := u.pods[p.Namespace+"/"+p.Name]
		if !ok {
			continue
		}
		pm := metricsv1beta1.PodMetrics{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, CreationTimestamp: metav1.NewTime(now)},
			Timestamp:  metav1.NewTime(u.Received), Window: metav1.Duration{Duration: u.Report.Window()},
			Containers: []metricsv1beta1.ContainerMetrics{},
		}
		for _, c := range u.Report.Pods[i].Containers {
			pm.Containers = append(pm.Containers, metricsv1beta1.ContainerMetrics{Name: c.Name, Usage: usageList(c.CPU, c.Memory)})
		}
		list.Items = append(list.Items, pm)
	}
	return writeMetrics(w, ri, list, len(list.Items), func() any {
		i := list.Items[0]
		i.TypeMeta = metav1.TypeMeta{Kind: "PodMetrics", APIVersion: metricsGV.String()}
		return &i
	})
}

// writeMetrics writes the list, or for a get its one item (404 without).
func writeMetrics(w http.ResponseWriter, ri *requestInfo, list any, n int, first func() any) error {
	if ri.Verb == "list" {
		writeJSON(w, http.StatusOK, list)
		return nil
	}
	if n == 0 {
		return apierrors.NewNotFound(ri.Resource.GVR.GroupResource(), ri.Name)
	}
	writeJSON(w, http.StatusOK, first())
	return nil
}

func usageList(nanocores, memory uint64) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewScaledQuantity(int64(nanocores), resource.Nano),
		corev1.ResourceMemory: *resource.NewQuantity(int64(memory), resource.BinarySI),
	}
}

// metricsResources is metrics.k8s.io/v1beta1's discovery.
func metricsResources() []metav1.APIResource {
	out := make([]metav1.APIResource, 0, len(metricsResource))
	for _, r := range metricsResource {
		out = append(out, metav1.APIResource{Name: r.GVR.Resource, SingularName: r.Singular, Namespaced: r.Namespaced, Kind: r.Kind, Verbs: metricsVerbs})
	}
	return out
}
