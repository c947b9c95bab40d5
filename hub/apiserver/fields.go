package apiserver

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
)

// supportedFields lists, per kind, the field labels a field selector may
// use beyond metadata.name and metadata.namespace — the ones clients rely on.
var supportedFields = map[string][]string{
	"Pod":        {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName", "status.phase", "status.podIP", "status.nominatedNodeName"},
	"Event":      {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"},
	"Secret":     {"type"},
	"Node":       {"spec.unschedulable"},
	"Namespace":  {"status.phase"},
	"ReplicaSet": {"status.replicas"},
}

func fieldsOf(obj runtime.Object) fields.Set {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	set := fields.Set{"metadata.name": m.GetName()}
	if m.GetNamespace() != "" {
		set["metadata.namespace"] = m.GetNamespace()
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		set["spec.nodeName"] = o.Spec.NodeName
		set["spec.restartPolicy"] = string(o.Spec.RestartPolicy)
		set["spec.schedulerName"] = o.Spec.SchedulerName
		set["spec.serviceAccountName"] = o.Spec.ServiceAccountName
		set["status.phase"] = string(o.Status.Phase)
		set["status.podIP"] = o.Status.PodIP
		set["status.nominatedNodeName"] = o.Status.NominatedNodeName
	case *corev1.Event:
		set["involvedObject.kind"] = o.InvolvedObject.Kind
		set["involvedObject.namespace"] = o.InvolvedObject.Namespace
		set["involvedObject.name"] = o.InvolvedObject.Name
		set["involvedObject.uid"] = string(o.InvolvedObject.UID)
		set["involvedObject.apiVersion"] = o.InvolvedObject.APIVersion
		set["involvedObject.resourceVersion"] = o.InvolvedObject.ResourceVersion
		set["involvedObject.fieldPath"] = o.InvolvedObject.FieldPath
		set["reason"] = o.Reason
		set["reportingComponent"] = o.ReportingController
		set["source"] = o.Source.Component
		set["type"] = o.Type
	case *corev1.Secret:
		set["type"] = string(o.Type)
	case *corev1.Node:
		set["spec.unschedulable"] = strconv.FormatBool(o.Spec.Unschedulable)
	case *corev1.Namespace:
		set["status.phase"] = string(o.Status.Phase)
	case *appsv1.ReplicaSet:
		set["status.replicas"] = strconv.Itoa(int(o.Status.Replicas))
	}
	return set
}

// parseFieldSelector parses a field selector and checks that every field
// it names is one the kind supports.
func parseFieldSelector(res *api.Resource, s string) (fields.Selector, error) {
	if s == "" {
		return fields.Everything(), nil
	}
	sel, err := fields.ParseSelector(s)
	if err != nil {
		return nil, badRequest("invalid field selector %q: %v", s, err)
	}
	allowed := map[string]bool{"metadata.name": true, "metadata.namespace": true}
	for _, f := range supportedFields[res.Kind] {
		allowed[f] = true
	}
	for _, req := range sel.Requirements() {
		if !allowed[req.Field] {
			return nil, badRequest("field label not supported: %s", req.Field)
		}
	}
	return sel, nil
}
