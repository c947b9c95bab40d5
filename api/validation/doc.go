// Package validation owns the hub's admission checks for every served kind:
// Kubernetes' validation rules (names, required fields, unique container and
// port names, port ranges, probes, volumes, selectors that match template
// labels, Service ports and cluster IPs, ConfigMap and Secret keys and size,
// EndpointSlices, Leases, Events, Nodes, Namespaces), the rules of
// Flotilla's GitSource, which fields an update may change, the image
// policy (images pinned by digest unless the hub allows tags), and the pod
// policy (PodSecurity: Kubernetes' Pod Security Standards levels, chosen per
// namespace; the apiserver enforces it on pods with the namespace in hand).
//
// Errors are a field.ErrorList whose paths and types are those Kubernetes
// reports ("spec.containers[0].name: Duplicate value"), so the apiserver
// can turn them into a 422 metav1.Status with one cause per field
// (apierrors.NewInvalid(gvk.GroupKind(), name, errs)).
//
// # What the apiserver calls, in order
//
// Create (POST):
//
//  1. decode the body into the kind's Go type;
//  2. set server-owned metadata (namespace from the URL, uid,
//     creationTimestamp, generation 1) and generate metadata.name from
//     generateName if the name is empty;
//  3. defaults.Default(obj);
//  4. validation.ValidateCreate(obj, opts): any error is a 422.
//
// Update (PUT, and every PATCH once the patch is applied):
//
//  1. decode the new object; for a resource with a status subresource,
//     copy the stored status into it (the main resource ignores status);
//  2. carry the server-owned metadata over from the stored object (uid,
//     creationTimestamp, deletionTimestamp, deletionGracePeriodSeconds),
//     fill resourceVersion from it for an unconditional update, and bump
//     generation if the spec changed;
//  3. defaults.DefaultUpdate(obj, old) (keeps an allocated cluster IP and
//     node ports a client left out);
//  4. validation.ValidateUpdate(obj, old, opts).
//
// Status update (PUT or PATCH on /status): copy the stored object's spec
// into the new object, carry the server-owned metadata over as for an
// update, run defaults.DefaultUpdate(obj, old) (harmless on a stored
// object, and it fills status defaults such as a Node's allocatable), then
// ValidateStatusUpdate(obj, old).
//
// The pods/binding subresource sets spec.nodeName itself and is not a Pod
// update: it does not go through ValidateUpdate.
//
// Unknown kinds get an internal error, never a silent pass.
package validation
