package api

import (
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"flotilla.dev/flotilla/api/v1alpha1"
)

// Resource describes one served resource: where it lives in the REST tree
// and how to make an empty object of it. The apiserver, the OpenAPI
// document, discovery, the printers and flotctl all read this one table.
type Resource struct {
	GVR        schema.GroupVersionResource
	Kind       string
	ListKind   string
	Singular   string
	Namespaced bool
	ShortNames []string
	Categories []string
	// HasStatus means the resource has a status subresource: the main
	// resource ignores status changes and /status ignores everything else.
	HasStatus bool
	New       func() runtime.Object
	NewList   func() runtime.Object
}

// GVK is the resource's group, version and kind.
func (r *Resource) GVK() schema.GroupVersionKind {
	return r.GVR.GroupVersion().WithKind(r.Kind)
}

var all = []*Resource{
	{GVR: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: "Namespace", Singular: "namespace", ShortNames: []string{"ns"}, HasStatus: true,
		New: func() runtime.Object { return &corev1.Namespace{} }, NewList: func() runtime.Object { return &corev1.NamespaceList{} }},
	{GVR: corev1.SchemeGroupVersion.WithResource("nodes"), Kind: "Node", Singular: "node", ShortNames: []string{"no"}, HasStatus: true,
		New: func() runtime.Object { return &corev1.Node{} }, NewList: func() runtime.Object { return &corev1.NodeList{} }},
	{GVR: corev1.SchemeGroupVersion.WithResource("pods"), Kind: "Pod", Singular: "pod", Namespaced: true, ShortNames: []string{"po"}, Categories: []string{"all"}, HasStatus: true,
		New: func() runtime.Object { return &corev1.Pod{} }, NewList: func() runtime.Object { return &corev1.PodList{} }},
	{GVR: corev1.SchemeGroupVersion.WithResource("services"), Kind: "Service", Singular: "service", Namespaced: true, ShortNames: []string{"svc"}, Categories: []string{"all"}, HasStatus: true,
		New: func() runtime.Object { return &corev1.Service{} }, NewList: func() runtime.Object { return &corev1.ServiceList{} }},
	{GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Kind: "ConfigMap", Singular: "configmap", Namespaced: true, ShortNames: []string{"cm"},
		New: func() runtime.Object { return &corev1.ConfigMap{} }, NewList: func() runtime.Object { return &corev1.ConfigMapList{} }},
	{GVR: corev1.SchemeGroupVersion.WithResource("secrets"), Kind: "Secret", Singular: "secret", Namespaced: true,
		New: func() runtime.Object { return &corev1.Secret{} }, NewList: func() runtime.Object { return &corev1.SecretList{} }},
	{GVR: corev1.SchemeGroupVersion.WithResource("events"), Kind: "Event", Singular: "event", Namespaced: true, ShortNames: []string{"ev"},
		New: func() runtime.Object { return &corev1.Event{} }, NewList: func() runtime.Object { return &corev1.EventList{} }},
	{GVR: appsv1.SchemeGroupVersion.WithResource("deployments"), Kind: "Deployment", Singular: "deployment", Namespaced: true, ShortNames: []string{"deploy"}, Categories: []string{"all"}, HasStatus: true,
		New: func() runtime.Object { return &appsv1.Deployment{} }, NewList: func() runtime.Object { return &appsv1.DeploymentList{} }},
	{GVR: appsv1.SchemeGroupVersion.WithResource("replicasets"), Kind: "ReplicaSet", Singular: "replicaset", Namespaced: true, ShortNames: []string{"rs"}, Categories: []string{"all"}, HasStatus: true,
		New: func() runtime.Object { return &appsv1.ReplicaSet{} }, NewList: func() runtime.Object { return &appsv1.ReplicaSetList{} }},
	{GVR: appsv1.SchemeGroupVersion.WithResource("daemonsets"), Kind: "DaemonSet", Singular: "daemonset", Namespaced: true, ShortNames: []string{"ds"}, Categories: []string{"all"}, HasStatus: true,
		New: func() runtime.Object { return &appsv1.DaemonSet{} }, NewList: func() runtime.Object { return &appsv1.DaemonSetList{} }},
	{GVR: batchv1.SchemeGroupVersion.WithResource("jobs"), Kind: "Job", Singular: "job", Namespaced: true, Categories: []string{"all"}, HasStatus: true,
		New: func() runtime.Object { return &batchv1.Job{} }, NewList: func() runtime.Object { return &batchv1.JobList{} }},
	{GVR: batchv1.SchemeGroupVersion.WithResource("cronjobs"), Kind: "CronJob", Singular: "cronjob", Namespaced: true, ShortNames: []string{"cj"}, Categories: []string{"all"}, HasStatus: true,
		New: func() runtime.Object { return &batchv1.CronJob{} }, NewList: func() runtime.Object { return &batchv1.CronJobList{} }},
	{GVR: appsv1.SchemeGroupVersion.WithResource("controllerrevisions"), Kind: "ControllerRevision", Singular: "controllerrevision", Namespaced: true,
		New: func() runtime.Object { return &appsv1.ControllerRevision{} }, NewList: func() runtime.Object { return &appsv1.ControllerRevisionList{} }},
	{GVR: coordinationv1.SchemeGroupVersion.WithResource("leases"), Kind: "Lease", Singular: "lease", Namespaced: true,
		New: func() runtime.Object { return &coordinationv1.Lease{} }, NewList: func() runtime.Object { return &coordinationv1.LeaseList{} }},
	{GVR: discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), Kind: "EndpointSlice", Singular: "endpointslice", Namespaced: true,
		New: func() runtime.Object { return &discoveryv1.EndpointSlice{} }, NewList: func() runtime.Object { return &discoveryv1.EndpointSliceList{} }},
	{GVR: schedulingv1.SchemeGroupVersion.WithResource("priorityclasses"), Kind: "PriorityClass", Singular: "priorityclass", ShortNames: []string{"pc"},
		New: func() runtime.Object { return &schedulingv1.PriorityClass{} }, NewList: func() runtime.Object { return &schedulingv1.PriorityClassList{} }},
	{GVR: v1alpha1.SchemeGroupVersion.WithResource("gitsources"), Kind: "GitSource", Singular: "gitsource", Namespaced: true, ShortNames: []string{"gs"}, HasStatus: true,
		New: func() runtime.Object { return &v1alpha1.GitSource{} }, NewList: func() runtime.Object { return &v1alpha1.GitSourceList{} }},
	{GVR: v1alpha1.SchemeGroupVersion.WithResource("rolloutpolicies"), Kind: "RolloutPolicy", Singular: "rolloutpolicy", Namespaced: true, ShortNames: []string{"rp"}, HasStatus: true,
		New: func() runtime.Object { return &v1alpha1.RolloutPolicy{} }, NewList: func() runtime.Object { return &v1alpha1.RolloutPolicyList{} }},
}

func init() {
	for _, r := range all {
		r.ListKind = r.Kind + "List"
	}
}

// Resources returns every served resource.
func Resources() []*Resource { return all }

// ResourceFor finds a served resource by group, version and plural name.
func ResourceFor(gvr schema.GroupVersionResource) (*Resource, bool) {
	for _, r := range all {
		if r.GVR == gvr {
			return r, true
		}
	}
	return nil, false
}

// ResourceForKind finds a served resource by group, version and kind.
func ResourceForKind(gvk schema.GroupVersionKind) (*Resource, bool) {
	for _, r := range all {
		if r.GVK() == gvk {
			return r, true
		}
	}
	return nil, false
}

// Lookup resolves what a person types (plural, singular, short name or
// kind, case-insensitively, optionally "name.group") to a served resource.
func Lookup(name string) (*Resource, error) {
	for _, r := range all {
		cands := append([]string{r.GVR.Resource, r.Singular, lower(r.Kind)}, r.ShortNames...)
		for _, c := range cands {
			if lower(name) == c || (r.GVR.Group != "" && lower(name) == c+"."+r.GVR.Group) {
				return r, nil
			}
		}
	}
	return nil, fmt.Errorf("the server doesn't have a resource type %q", name)
}

// GroupVersions lists the served group-versions, core first.
func GroupVersions() []schema.GroupVersion {
	seen := map[schema.GroupVersion]bool{}
	var out []schema.GroupVersion
	for _, r := range all {
		gv := r.GVR.GroupVersion()
		if !seen[gv] {
			seen[gv] = true
			out = append(out, gv)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
