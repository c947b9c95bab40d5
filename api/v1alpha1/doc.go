// Package v1alpha1 is the flotilla.dev/v1alpha1 API group: Flotilla's own
// kinds, served beside the Kubernetes ones.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +groupName=flotilla.dev
package v1alpha1
