package ctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"flotilla.dev/flotilla/internal/hubconn"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
)

// Clients are what the commands talk to the hub with.
type Clients struct {
	Typed   kubernetes.Interface
	Dynamic dynamic.Interface
	// Namespace is the namespace of the current context, or -n.
	Namespace string
	// Host is the hub's address, for error messages.
	Host string
}

// ConfigFlags are the global flags that choose the hub and namespace.
type ConfigFlags struct {
	Kubeconfig string
	// Hub replaces the kubeconfig's server: one URL, or several
	// comma-separated (hubs sharing an etcd; whichever answers).
	Hub           string
	Context       string
	Namespace     string
	AllNamespaces bool
}

// errNoConfig tells the user where flotctl looked for a client config.
var errNoConfig = errors.New("no client configuration found")

// KubeconfigPath resolves which kubeconfig to read: --kubeconfig, else
// $FLOTILLA_KUBECONFIG, else $KUBECONFIG (a path list), else
// ~/.flotilla/config. It returns the list of candidate files.
func KubeconfigPath(flag string, getenv func(string) string) []string {
	if flag != "" {
		return []string{flag}
	}
	if p := getenv("FLOTILLA_KUBECONFIG"); p != "" {
		return []string{p}
	}
	if p := getenv("KUBECONFIG"); p != "" {
		return filepath.SplitList(p)
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return []string{filepath.Join(home, ".flotilla", "config")}
}

// RESTConfig loads the client configuration the flags select.
func (f *ConfigFlags) RESTConfig(getenv func(string) string) (*rest.Config, string, error) {
	paths := KubeconfigPath(f.Kubeconfig, getenv)
	rules := &clientcmd.ClientConfigLoadingRules{Precedence: paths}
	if f.Kubeconfig != "" {
		rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: f.Kubeconfig}
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.Context}
	if f.Namespace != "" {
		overrides.Context.Namespace = f.Namespace
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, "", fmt.Errorf("%w (looked in %v): pass --kubeconfig, set FLOTILLA_KUBECONFIG or KUBECONFIG, or copy the hub's DATA_DIR/admin.kubeconfig to ~/.flotilla/config", errNoConfig, paths)
		}
		return nil, "", fmt.Errorf("loading the client configuration: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace of the current context: %w", err)
	}
	hub := f.Hub
	if hub == "" {
		hub = getenv("FLOTILLA_HUB")
	}
	if hub != "" {
		hubs, err := hubconn.ParseURLs(hub)
		if err != nil {
			return nil, "", fmt.Errorf("--hub: %w", err)
		}
		if _, err := hubconn.Apply(cfg, hubs, nil); err != nil {
			return nil, "", fmt.Errorf("--hub: %w", err)
		}
	}
	cfg.UserAgent = "flotctl"
	return cfg, ns, nil
}

// NewClients builds the clients for a config.
func NewClients(cfg *rest.Config, namespace string) (*Clients, error) {
	typed, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the client for %s: %w", cfg.Host, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the client for %s: %w", cfg.Host, err)
	}
	return &Clients{Typed: typed, Dynamic: dyn, Namespace: namespace, Host: cfg.Host}, nil
}

// resourceClient is what the generic verbs (get, delete, apply, watch)
// need of one resource in one namespace, whichever client serves it.
type resourceClient interface {
	Get(ctx context.Context, name string) (runtime.Object, error)
	List(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, obj runtime.Object) (runtime.Object, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte) (runtime.Object, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// typedAPI is the shape every client-go typed resource client has.
type typedAPI[T runtime.Object, L runtime.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

type typed[T runtime.Object, L runtime.Object] struct{ c typedAPI[T, L] }

func (t typed[T, L]) Get(ctx context.Context, name string) (runtime.Object, error) {
	return t.c.Get(ctx, name, metav1.GetOptions{})
}

func (t typed[T, L]) List(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return t.c.List(ctx, opts)
}

func (t typed[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return t.c.Watch(ctx, opts)
}

func (t typed[T, L]) Create(ctx context.Context, obj runtime.Object) (runtime.Object, error) {
	o, ok := obj.(T)
	if !ok {
		return nil, fmt.Errorf("creating: got %T, want %T", obj, o)
	}
	return t.c.Create(ctx, o, metav1.CreateOptions{FieldManager: "flotctl"})
}

func (t typed[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte) (runtime.Object, error) {
	return t.c.Patch(ctx, name, pt, data, metav1.PatchOptions{FieldManager: "flotctl"})
}

func (t typed[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return t.c.Delete(ctx, name, opts)
}

func adapt[T runtime.Object, L runtime.Object](c typedAPI[T, L]) resourceClient {
	return typed[T, L]{c}
}

// dynamicClient serves kinds without a typed client (GitSource) and hands
// out typed objects, so printing and describing see one shape.
type dynamicClient struct {
	c dynamic.ResourceInterface
	r *api.Resource
}

func (d dynamicClient) toTyped(u runtime.Unstructured) (runtime.Object, error) {
	var out runtime.Object
	if _, isList := u.(*unstructured.UnstructuredList); isList {
		out = d.r.NewList()
	} else {
		out = d.r.New()
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), out); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", d.r.GVR.Resource, err)
	}
	return out, nil
}

func (d dynamicClient) Get(ctx context.Context, name string) (runtime.Object, error) {
	u, err := d.c.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return d.toTyped(u)
}

func (d dynamicClient) List(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	u, err := d.c.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	return d.toTyped(u)
}

func (d dynamicClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := d.c.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if u, ok := e.Object.(*unstructured.Unstructured); ok {
			if t, err := d.toTyped(u); err == nil {
				e.Object = t
			}
		}
		return e, true
	}), nil
}

func (d dynamicClient) Create(ctx context.Context, obj runtime.Object) (runtime.Object, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(d.r.GVK())
	out, err := d.c.Create(ctx, u, metav1.CreateOptions{FieldManager: "flotctl"})
	if err != nil {
		return nil, err
	}
	return d.toTyped(out)
}

func (d dynamicClient) Patch(ctx context.Context, name string, pt types.PatchType, data []byte) (runtime.Object, error) {
	u, err := d.c.Patch(ctx, name, pt, data, metav1.PatchOptions{FieldManager: "flotctl"})
	if err != nil {
		return nil, err
	}
	return d.toTyped(u)
}

func (d dynamicClient) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return d.c.Delete(ctx, name, opts)
}

// clientFor returns the client of one served resource in namespace ns
// ("" for all namespaces or for cluster-scoped resources).
func (c *Clients) clientFor(r *api.Resource, ns string) (resourceClient, error) {
	if !r.Namespaced {
		ns = ""
	}
	cs := c.Typed
	switch r.GVR.Resource {
	case "namespaces":
		return adapt(cs.CoreV1().Namespaces()), nil
	case "nodes":
		return adapt(cs.CoreV1().Nodes()), nil
	case "pods":
		return adapt(cs.CoreV1().Pods(ns)), nil
	case "services":
		return adapt(cs.CoreV1().Services(ns)), nil
	case "configmaps":
		return adapt(cs.CoreV1().ConfigMaps(ns)), nil
	case "secrets":
		return adapt(cs.CoreV1().Secrets(ns)), nil
	case "events":
		return adapt(cs.CoreV1().Events(ns)), nil
	case "deployments":
		return adapt(cs.AppsV1().Deployments(ns)), nil
	case "replicasets":
		return adapt(cs.AppsV1().ReplicaSets(ns)), nil
	case "daemonsets":
		return adapt(cs.AppsV1().DaemonSets(ns)), nil
	case "leases":
		return adapt(cs.CoordinationV1().Leases(ns)), nil
	case "endpointslices":
		return adapt(cs.DiscoveryV1().EndpointSlices(ns)), nil
	}
	if r.GVR.GroupVersion() == v1alpha1.SchemeGroupVersion {
		var ri dynamic.ResourceInterface = c.Dynamic.Resource(r.GVR)
		if r.Namespaced {
			ri = c.Dynamic.Resource(r.GVR).Namespace(ns)
		}
		return dynamicClient{c: ri, r: r}, nil
	}
	return nil, fmt.Errorf("flotctl has no client for %s", r.GVR.Resource)
}
