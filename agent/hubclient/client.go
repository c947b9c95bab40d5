package hubclient

import (
	"fmt"
	"log/slog"
	"net/http"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"flotilla.dev/flotilla/agent/tunnel"
	"flotilla.dev/flotilla/agent/watchmux"
)

// Interface is the part of the hub's API the agent uses.
type Interface interface {
	CoreV1() CoreV1Interface
	DiscoveryV1() DiscoveryV1Interface
	CoordinationV1() CoordinationV1Interface
}

// CoreV1Interface is the agent's part of core/v1.
type CoreV1Interface interface {
	Pods(namespace string) PodInterface
	Nodes() NodeInterface
	Services(namespace string) ServiceInterface
	ConfigMaps(namespace string) ConfigMapInterface
	Secrets(namespace string) SecretInterface
	Events(namespace string) EventInterface
}

// DiscoveryV1Interface is the agent's part of discovery.k8s.io/v1.
type DiscoveryV1Interface interface {
	EndpointSlices(namespace string) EndpointSliceInterface
}

// CoordinationV1Interface is the agent's part of coordination.k8s.io/v1.
type CoordinationV1Interface interface {
	Leases(namespace string) LeaseInterface
}

type (
	PodInterface           = StatusResource[*corev1.Pod, *corev1.PodList]
	NodeInterface          = StatusResource[*corev1.Node, *corev1.NodeList]
	ServiceInterface       = Resource[*corev1.Service, *corev1.ServiceList]
	ConfigMapInterface     = Resource[*corev1.ConfigMap, *corev1.ConfigMapList]
	SecretInterface        = Resource[*corev1.Secret, *corev1.SecretList]
	EventInterface         = Resource[*corev1.Event, *corev1.EventList]
	EndpointSliceInterface = Resource[*discoveryv1.EndpointSlice, *discoveryv1.EndpointSliceList]
	LeaseInterface         = Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
)

// Clientset is Interface over a rest.Config.
type Clientset struct {
	core         coreV1
	discovery    discoveryV1
	coordination coordinationV1
}

var _ Interface = (*Clientset)(nil)

// NewForConfig makes the clients as kubernetes.NewForConfig would: one
// HTTP client (so one connection pool to the hub) and one rate limiter
// for all groups, so that c.QPS bounds the agent's requests as a whole.
func NewForConfig(c *rest.Config) (*Clientset, error) {
	cfg := *c
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		if cfg.Burst <= 0 {
			return nil, fmt.Errorf("hub client: QPS %v needs a Burst greater than 0", cfg.QPS)
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	// All of the agent's requests in one tunnel to the hub, under
	// client-go's header wrappers.
	cfg.Wrap(tunnel.Wrap(slog.Default()))
	httpClient, err := rest.HTTPClientFor(&cfg)
	if err != nil {
		return nil, fmt.Errorf("hub client: %w", err)
	}
	// All of the agent's watches on one stream to the hub.
	httpClient.Transport = watchmux.New(httpClient.Transport)
	var cs Clientset
	if cs.core.rest, err = groupClient(&cfg, httpClient, "/api", corev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if cs.discovery.rest, err = groupClient(&cfg, httpClient, "/apis", discoveryv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if cs.coordination.rest, err = groupClient(&cfg, httpClient, "/apis", coordinationv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	return &cs, nil
}

// groupClient is the REST client of one group version, configured as
// client-go's generated clients configure theirs, but over Scheme.
func groupClient(c *rest.Config, h *http.Client, apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
	cfg := *c
	cfg.GroupVersion = &gv
	cfg.APIPath = apiPath
	cfg.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(Scheme, Codecs).WithoutConversion()
	rc, err := rest.RESTClientForConfigAndClient(&cfg, h)
	if err != nil {
		return nil, fmt.Errorf("hub client (%s): %w", gv, err)
	}
	return rc, nil
}

// RESTClients are the clients of core/v1, discovery.k8s.io/v1 and
// coordination.k8s.io/v1, in that order.
func (c *Clientset) RESTClients() []rest.Interface {
	return []rest.Interface{c.core.rest, c.discovery.rest, c.coordination.rest}
}

func (c *Clientset) CoreV1() CoreV1Interface { return c.core }

func (c *Clientset) DiscoveryV1() DiscoveryV1Interface { return c.discovery }

func (c *Clientset) CoordinationV1() CoordinationV1Interface { return c.coordination }

type coreV1 struct{ rest *rest.RESTClient }

func (g coreV1) Pods(namespace string) PodInterface {
	return newResource(g.rest, "pods", namespace, func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} })
}

func (g coreV1) Nodes() NodeInterface {
	return newResource(g.rest, "nodes", "", func() *corev1.Node { return &corev1.Node{} }, func() *corev1.NodeList { return &corev1.NodeList{} })
}

func (g coreV1) Services(namespace string) ServiceInterface {
	return newResource(g.rest, "services", namespace, func() *corev1.Service { return &corev1.Service{} }, func() *corev1.ServiceList { return &corev1.ServiceList{} })
}

func (g coreV1) ConfigMaps(namespace string) ConfigMapInterface {
	return newResource(g.rest, "configmaps", namespace, func() *corev1.ConfigMap { return &corev1.ConfigMap{} }, func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} })
}

func (g coreV1) Secrets(namespace string) SecretInterface {
	return newResource(g.rest, "secrets", namespace, func() *corev1.Secret { return &corev1.Secret{} }, func() *corev1.SecretList { return &corev1.SecretList{} })
}

func (g coreV1) Events(namespace string) EventInterface {
	return newResource(g.rest, "events", namespace, func() *corev1.Event { return &corev1.Event{} }, func() *corev1.EventList { return &corev1.EventList{} })
}

type discoveryV1 struct{ rest *rest.RESTClient }

func (g discoveryV1) EndpointSlices(namespace string) EndpointSliceInterface {
	return newResource(g.rest, "endpointslices", namespace, func() *discoveryv1.EndpointSlice { return &discoveryv1.EndpointSlice{} }, func() *discoveryv1.EndpointSliceList { return &discoveryv1.EndpointSliceList{} })
}

type coordinationV1 struct{ rest *rest.RESTClient }

func (g coordinationV1) Leases(namespace string) LeaseInterface {
	return newResource(g.rest, "leases", namespace, func() *coordinationv1.Lease { return &coordinationv1.Lease{} }, func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} })
}
