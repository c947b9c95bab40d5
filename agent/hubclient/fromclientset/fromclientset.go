package fromclientset

import (
	"k8s.io/client-go/kubernetes"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typeddiscoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/util/watchlist"

	"flotilla.dev/flotilla/agent/hubclient"
)

// New is c as a hubclient.Interface. Informers made over it stream their
// initial lists (WatchList) exactly when they would over c: client-go's
// fake says it cannot.
func New(c kubernetes.Interface) hubclient.Interface {
	return client{c, watchlist.DoesClientNotSupportWatchListSemantics(c)}
}

type client struct {
	c           kubernetes.Interface
	noWatchList bool
}

func (c client) CoreV1() hubclient.CoreV1Interface { return core{c.c.CoreV1()} }

func (c client) DiscoveryV1() hubclient.DiscoveryV1Interface { return discovery{c.c.DiscoveryV1()} }

func (c client) CoordinationV1() hubclient.CoordinationV1Interface {
	return coordination{c.c.CoordinationV1()}
}

// IsWatchListSemanticsUnSupported is what cache.ToListWatcherWithWatchListSemantics asks.
func (c client) IsWatchListSemanticsUnSupported() bool { return c.noWatchList }

// client-go's typed clients have every method of hubclient's, with the
// same signatures: each group only hands them out under the agent's types.

type core struct{ c typedcorev1.CoreV1Interface }

func (g core) Pods(ns string) hubclient.PodInterface { return g.c.Pods(ns) }

func (g core) Nodes() hubclient.NodeInterface { return g.c.Nodes() }

func (g core) Services(ns string) hubclient.ServiceInterface { return g.c.Services(ns) }

func (g core) ConfigMaps(ns string) hubclient.ConfigMapInterface { return g.c.ConfigMaps(ns) }

func (g core) Secrets(ns string) hubclient.SecretInterface { return g.c.Secrets(ns) }

func (g core) Events(ns string) hubclient.EventInterface { return g.c.Events(ns) }

type discovery struct {
	c typeddiscoveryv1.DiscoveryV1Interface
}

func (g discovery) EndpointSlices(ns string) hubclient.EndpointSliceInterface {
	return g.c.EndpointSlices(ns)
}

type coordination struct {
	c typedcoordinationv1.CoordinationV1Interface
}

func (g coordination) Leases(ns string) hubclient.LeaseInterface { return g.c.Leases(ns) }
