package hubclient

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Scheme holds the types of the groups the agent talks to the hub in, and
// nothing else: client-go's kubernetes/scheme registers every API group's
// types, which keeps all of them (their protobuf and deep-copy code) in
// the binary.
var Scheme = runtime.NewScheme()

// Codecs encodes and decodes the bodies of Scheme's kinds.
var Codecs = serializer.NewCodecFactory(Scheme)

// ParameterCodec turns the options of a request (ListOptions, ...) into
// its query.
var ParameterCodec = runtime.NewParameterCodec(Scheme)

func init() {
	// The options, Status and WatchEvent without a group, as a request's
	// parameters and the hub's errors and watch frames carry them.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(corev1.AddToScheme(Scheme))
	utilruntime.Must(discoveryv1.AddToScheme(Scheme))
	utilruntime.Must(coordinationv1.AddToScheme(Scheme))
}
