package rollout

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/api/defaults"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
)

// GVR is where RolloutPolicies are served.
var GVR = v1alpha1.SchemeGroupVersion.WithResource("rolloutpolicies")

// Policies is a cache of RolloutPolicies as typed objects. The hub has no
// generated clientset for its own group, so the informer is the dynamic
// one, converting each object once as it is stored.
type Policies struct {
	inf cache.SharedIndexInformer
}

// NewPolicies registers the RolloutPolicy informer with factory.
func NewPolicies(factory dynamicinformer.DynamicSharedInformerFactory) (*Policies, error) {
	inf := factory.ForResource(GVR).Informer()
	if err := inf.SetTransform(toPolicy); err != nil {
		return nil, fmt.Errorf("rolloutpolicy informer: %w", err)
	}
	return &Policies{inf: inf}, nil
}

func toPolicy(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	rp := &v1alpha1.RolloutPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, rp); err != nil {
		return nil, fmt.Errorf("rolloutpolicy %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	// The hub defaults what it stores; this only covers objects written
	// before a default was introduced.
	defaults.Default(rp)
	return rp, nil
}

// HasSynced reports whether the cache has been filled.
func (p *Policies) HasSynced() bool { return p.inf.HasSynced() }

// AddEventHandler calls h on every change of a RolloutPolicy.
func (p *Policies) AddEventHandler(h cache.ResourceEventHandler) error {
	_, err := p.inf.AddEventHandler(h)
	return err
}

// Get returns namespace/name from the cache.
func (p *Policies) Get(namespace, name string) (*v1alpha1.RolloutPolicy, bool) {
	obj, ok, err := p.inf.GetStore().GetByKey(cacheKey(namespace, name))
	if err != nil || !ok {
		return nil, false
	}
	rp, ok := obj.(*v1alpha1.RolloutPolicy)
	return rp, ok
}

// InNamespace lists the policies of namespace by name.
func (p *Policies) InNamespace(namespace string) []*v1alpha1.RolloutPolicy {
	var out []*v1alpha1.RolloutPolicy
	for _, obj := range p.inf.GetStore().List() {
		if rp, ok := obj.(*v1alpha1.RolloutPolicy); ok && rp.Namespace == namespace {
			out = append(out, rp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// For returns the policy that stages a workload with these labels (see
// waves.PolicyFor).
func (p *Policies) For(namespace string, workloadLabels map[string]string) *v1alpha1.RolloutPolicy {
	return waves.PolicyFor(p.InNamespace(namespace), workloadLabels)
}

func cacheKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}
