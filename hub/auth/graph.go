package auth

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Graph knows which pods are bound to which node and which Secrets and
// ConfigMaps each node's pods reference. It is safe for concurrent use.
type Graph struct {
	mu     sync.RWMutex
	pods   map[string]podRefs // "ns/name"
	nodes  map[string]*nodeRefs
	synced bool
	// changed is closed (and replaced) whenever the graph changes, so
	// that a refusal can wait a moment for a pod the graph has not seen
	// yet.
	changed chan struct{}
}

type podRefs struct {
	node       string
	secrets    []string // "ns/name"
	configMaps []string
}

type nodeRefs struct {
	pods       map[string]bool
	secrets    map[string]int
	configMaps map[string]int
}

// NewGraph returns an empty graph; Run fills it, tests call SetPod.
func NewGraph() *Graph {
	return &Graph{pods: map[string]podRefs{}, nodes: map[string]*nodeRefs{}, changed: make(chan struct{})}
}

func key(ns, name string) string { return ns + "/" + name }

// SetPod records (or replaces) what a pod references.
func (g *Graph) SetPod(pod *corev1.Pod) {
	k := key(pod.Namespace, pod.Name)
	refs := podRefs{node: pod.Spec.NodeName}
	if refs.node != "" {
		refs.secrets, refs.configMaps = podReferences(pod)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.removeLocked(k)
	if refs.node != "" {
		g.pods[k] = refs
		n := g.nodes[refs.node]
		if n == nil {
			n = &nodeRefs{pods: map[string]bool{}, secrets: map[string]int{}, configMaps: map[string]int{}}
			g.nodes[refs.node] = n
		}
		n.pods[k] = true
		for _, s := range refs.secrets {
			n.secrets[s]++
		}
		for _, c := range refs.configMaps {
			n.configMaps[c]++
		}
	}
	g.notifyLocked()
}

// DeletePod forgets a pod.
func (g *Graph) DeletePod(ns, name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.removeLocked(key(ns, name))
	g.notifyLocked()
}

func (g *Graph) removeLocked(k string) {
	old, ok := g.pods[k]
	if !ok {
		return
	}
	delete(g.pods, k)
	n := g.nodes[old.node]
	if n == nil {
		return
	}
	delete(n.pods, k)
	for _, s := range old.secrets {
		if n.secrets[s]--; n.secrets[s] <= 0 {
			delete(n.secrets, s)
		}
	}
	for _, c := range old.configMaps {
		if n.configMaps[c]--; n.configMaps[c] <= 0 {
			delete(n.configMaps, c)
		}
	}
	if len(n.pods) == 0 {
		delete(g.nodes, old.node)
	}
}

func (g *Graph) notifyLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// MarkSynced says the graph holds every pod (tests; Run does it itself).
func (g *Graph) MarkSynced() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.synced = true
	g.notifyLocked()
}

// PodOnNode reports whether pod ns/name is bound to node.
func (g *Graph) PodOnNode(node, ns, name string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.pods[key(ns, name)].node == node
}

// References reports whether a pod bound to node references the Secret
// (secret true) or ConfigMap ns/name.
func (g *Graph) References(node string, secret bool, ns, name string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.nodes[node]
	if n == nil {
		return false
	}
	if secret {
		return n.secrets[key(ns, name)] > 0
	}
	return n.configMaps[key(ns, name)] > 0
}

// waitFor evaluates check until it holds, the graph stops changing for
// max, or ctx ends. A pod bound a moment ago may reach the device's watch
// before it reaches the graph; waiting briefly on a refusal spares the
// device a 403 and a retry.
func (g *Graph) waitFor(ctx context.Context, max time.Duration, check func() bool) bool {
	deadline := time.NewTimer(max)
	defer deadline.Stop()
	for {
		g.mu.RLock()
		ch := g.changed
		g.mu.RUnlock()
		if check() {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// Synced reports whether the graph has loaded every pod once.
func (g *Graph) Synced() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.synced
}

// Run keeps the graph current from a watch of pods through the API at cfg
// until ctx ends. The informer keeps only what the graph needs of each pod.
func (g *Graph) Run(ctx context.Context, cfg *rest.Config) error {
	// It watches every pod of the fleet, in protobuf as the loops do:
	// while a DaemonSet rolled out to 10,000 devices, decoding watch
	// events in JSON (its and the garbage collector's metadata, which
	// has no protobuf) was 4 % of the hub's CPU.
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("node authorizer: %w", err)
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(slimPod))
	inf := f.Core().V1().Pods().Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { g.onPod(o) },
		UpdateFunc: func(_, o any) { g.onPod(o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				g.DeletePod(p.Namespace, p.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("node authorizer: %w", err)
	}
	f.Start(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		g.MarkSynced()
	}
	<-ctx.Done()
	f.Shutdown()
	return nil
}

func (g *Graph) onPod(o any) {
	if p, ok := o.(*corev1.Pod); ok {
		g.SetPod(p)
	}
}

// slimPod keeps of a pod only what the graph reads, so that the
// authorizer's copy of every pod costs little memory.
func slimPod(o any) (any, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return o, nil
	}
	s := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion}}
	s.Spec.NodeName = p.Spec.NodeName
	if p.Spec.NodeName == "" {
		return s, nil
	}
	s.Spec.Volumes = p.Spec.Volumes
	s.Spec.ImagePullSecrets = p.Spec.ImagePullSecrets
	slim := func(cs []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, len(cs))
		for i, c := range cs {
			out[i] = corev1.Container{Env: c.Env, EnvFrom: c.EnvFrom}
		}
		return out
	}
	s.Spec.Containers = slim(p.Spec.Containers)
	s.Spec.InitContainers = slim(p.Spec.InitContainers)
	for _, e := range p.Spec.EphemeralContainers {
		s.Spec.EphemeralContainers = append(s.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Env: e.Env, EnvFrom: e.EnvFrom}})
	}
	return s, nil
}

// podReferences lists the Secrets and ConfigMaps ("ns/name") a pod
// references: volumes (also projected), env, envFrom and image pull
// secrets, in every kind of container.
func podReferences(p *corev1.Pod) (secrets, configMaps []string) {
	seenS, seenC := map[string]bool{}, map[string]bool{}
	addS := func(n string) {
		if n != "" && !seenS[n] {
			seenS[n] = true
			secrets = append(secrets, key(p.Namespace, n))
		}
	}
	addC := func(n string) {
		if n != "" && !seenC[n] {
			seenC[n] = true
			configMaps = append(configMaps, key(p.Namespace, n))
		}
	}
	for _, s := range p.Spec.ImagePullSecrets {
		addS(s.Name)
	}
	for _, v := range p.Spec.Volumes {
		if v.Secret != nil {
			addS(v.Secret.SecretName)
		}
		if v.ConfigMap != nil {
			addC(v.ConfigMap.Name)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					addS(src.Secret.Name)
				}
				if src.ConfigMap != nil {
					addC(src.ConfigMap.Name)
				}
			}
		}
	}
	env := func(envs []corev1.EnvVar, from []corev1.EnvFromSource) {
		for _, e := range envs {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				addS(r.Name)
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				addC(r.Name)
			}
		}
		for _, f := range from {
			if f.SecretRef != nil {
				addS(f.SecretRef.Name)
			}
			if f.ConfigMapRef != nil {
				addC(f.ConfigMapRef.Name)
			}
		}
	}
	for _, c := range p.Spec.InitContainers {
		env(c.Env, c.EnvFrom)
	}
	for _, c := range p.Spec.Containers {
		env(c.Env, c.EnvFrom)
	}
	for _, c := range p.Spec.EphemeralContainers {
		env(c.Env, c.EnvFrom)
	}
	return secrets, configMaps
}
