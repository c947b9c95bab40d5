//go:build tools

// Package deps pins the modules the project builds on, so that go.mod keeps
// them while the packages that use them are being written, and so that
// parallel work never races on editing go.mod.
package deps

import (
	_ "github.com/containerd/containerd/v2/client"
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/containernetworking/plugins/pkg/ns"
	_ "github.com/coreos/go-iptables/iptables"
	_ "github.com/evanphx/json-patch/v5"
	_ "github.com/go-git/go-git/v5"
	_ "github.com/miekg/dns"
	_ "github.com/opencontainers/image-spec/specs-go/v1"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/viper"
	_ "github.com/vishvananda/netlink"
	_ "go.etcd.io/bbolt"
	_ "k8s.io/apimachinery/pkg/util/strategicpatch"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "k8s.io/client-go/tools/record"
	_ "k8s.io/kube-openapi/pkg/builder"
	_ "k8s.io/kube-openapi/pkg/builder3"
	_ "k8s.io/kube-openapi/pkg/handler"
	_ "k8s.io/kube-openapi/pkg/handler3"
	_ "pgregory.net/rapid"
	_ "sigs.k8s.io/kustomize/api/krusty"
	_ "sigs.k8s.io/kustomize/kyaml/filesys"
	_ "sigs.k8s.io/yaml"
)
