package hubclient

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// Resource is the client of one kind, with client-go's typed clients'
// signatures (less apply), so that one of theirs is also a Resource.
type Resource[T runtime.Object, L runtime.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// StatusResource is the client of a kind with a status subresource.
type StatusResource[T runtime.Object, L runtime.Object] interface {
	Resource[T, L]
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

type object interface {
	runtime.Object
	GetName() string
}

// resource is one kind's client over the REST client of its group, doing
// what client-go's gentype.Client does for a typed client.
type resource[T object, L runtime.Object] struct {
	rest      rest.Interface
	name      string // the resource: "pods", "leases", ...
	namespace string // empty for every namespace, or for a cluster-scoped kind
	newObj    func() T
	newList   func() L
}

func newResource[T object, L runtime.Object](rc rest.Interface, name, namespace string, newObj func() T, newList func() L) *resource[T, L] {
	return &resource[T, L]{rest: rc, name: name, namespace: namespace, newObj: newObj, newList: newList}
}

// request starts a request on the kind: in protobuf unless the config
// asks for a content type, as client-go's typed clients of these kinds
// do (smaller and cheaper to decode than JSON on a device).
func (c *resource[T, L]) request(r *rest.Request) *rest.Request {
	return r.UseProtobufAsDefault().NamespaceIfScoped(c.namespace, c.namespace != "").Resource(c.name)
}

func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

func (c *resource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := c.newObj()
	err := c.request(c.rest.Get()).Name(name).VersionedParams(&opts, ParameterCodec).Do(ctx).Into(out)
	return out, err
}

func (c *resource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := c.newList()
	err := c.request(c.rest.Get()).VersionedParams(&opts, ParameterCodec).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

func (c *resource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.request(c.rest.Get()).VersionedParams(&opts, ParameterCodec).Timeout(timeout(opts)).Watch(ctx)
}

func (c *resource[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := c.newObj()
	err := c.request(c.rest.Post()).VersionedParams(&opts, ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c *resource[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := c.newObj()
	err := c.request(c.rest.Put()).Name(obj.GetName()).VersionedParams(&opts, ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c *resource[T, L]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := c.newObj()
	err := c.request(c.rest.Put()).Name(obj.GetName()).SubResource("status").VersionedParams(&opts, ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c *resource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.request(c.rest.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

func (c *resource[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	out := c.newObj()
	err := c.request(c.rest.Patch(pt)).Name(name).SubResource(subresources...).VersionedParams(&opts, ParameterCodec).Body(data).Do(ctx).Into(out)
	return out, err
}
