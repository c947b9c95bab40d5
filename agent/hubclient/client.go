package hubclient

import (
	"fmt"

	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Interface is the part of the hub's API the agent uses.
type Interface interface {
	CoreV1() corev1.CoreV1Interface
	DiscoveryV1() discoveryv1.DiscoveryV1Interface
	CoordinationV1() coordinationv1.CoordinationV1Interface
}

// Clientset is Interface over a rest.Config.
type Clientset struct {
	core         *corev1.CoreV1Client
	discovery    *discoveryv1.DiscoveryV1Client
	coordination *coordinationv1.CoordinationV1Client
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
	httpClient, err := rest.HTTPClientFor(&cfg)
	if err != nil {
		return nil, fmt.Errorf("hub client: %w", err)
	}
	var cs Clientset
	if cs.core, err = corev1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, fmt.Errorf("hub client (core/v1): %w", err)
	}
	if cs.discovery, err = discoveryv1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, fmt.Errorf("hub client (discovery/v1): %w", err)
	}
	if cs.coordination, err = coordinationv1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, fmt.Errorf("hub client (coordination/v1): %w", err)
	}
	return &cs, nil
}

func (c *Clientset) CoreV1() corev1.CoreV1Interface { return c.core }

func (c *Clientset) DiscoveryV1() discoveryv1.DiscoveryV1Interface { return c.discovery }

func (c *Clientset) CoordinationV1() coordinationv1.CoordinationV1Interface { return c.coordination }
