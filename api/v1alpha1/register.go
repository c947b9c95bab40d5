package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is Flotilla's API group.
const GroupName = "flotilla.dev"

// SchemeGroupVersion is the group and version of these kinds.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

var (
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	AddToScheme   = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &GitSource{}, &GitSourceList{}, &RolloutPolicy{}, &RolloutPolicyList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
