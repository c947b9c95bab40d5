// Package endpointslice owns the EndpointSlice loop: for every Service with
// a selector it keeps EndpointSlices listing the Service's pods, so that
// every device's proxy can route to them.
//
// As in Kubernetes: slices hold at most 100 endpoints, carry the
// kubernetes.io/service-name label and this controller's managed-by label,
// and are owned by the Service (the garbage collector removes them with it).
// A named targetPort is resolved from each pod's own container ports, so
// pods that disagree on a port number land in different slices. Each
// endpoint says ready (pod Ready and not terminating), serving (pod Ready,
// whether terminating or not) and terminating. Pods without an IPv4 address
// are left out; publishNotReadyAddresses makes every pod ready. A Service
// without endpoints gets one empty placeholder slice. Changes touch as few
// slices as possible: endpoints stay in the slice they are in, new ones
// fill existing room first, and only slices whose content changes are
// written.
package endpointslice
