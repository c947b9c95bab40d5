package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/defaults"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/api/validation"
	"flotilla.dev/flotilla/gitops/controller"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/hub/controllers/manager"
	"flotilla.dev/flotilla/hub/controllers/nodelifecycle"
)

// GitOpsLeaseName is the Lease (in flotilla-system) the hub that polls
// the GitSources holds, when several hubs share an etcd.
const GitOpsLeaseName = "flotilla-gitops"

// GitOpsManager is the GitOps applier's user agent, so its field manager.
const GitOpsManager = "flotilla-gitops"

// loops lists what runs inside the hub against its own API, and the
// unauthenticated handlers they serve on the hub's listener.
func loops(v *viper.Viper, log *slog.Logger) ([]hub.Loop, map[string]http.Handler, error) {
	sources, err := sourcesFromFlags(v)
	if err != nil {
		return nil, nil, err
	}
	clusterCIDR := v.GetString("cluster-cidr")
	if _, err := api.ParseClusterCIDRs(clusterCIDR); err != nil {
		return nil, nil, fmt.Errorf("--cluster-cidr: %w", err)
	}
	hooks := controller.NewHooks()
	dataDir := v.GetString("data-dir")
	// Hubs sharing an etcd run the loops on one of them at a time, under
	// a Lease each; a lone hub on bbolt needs no election (and does not
	// wait out a dead predecessor's lease after a crash).
	elect := v.GetString("store") == hub.StoreEtcd
	// A dead leader is replaced within 15 s: its Lease runs out after 10 s
	// and a candidate tries every 2 s (measured: make bench -only etcd).
	election := func(lease string) controllerutil.LeaderElection {
		return controllerutil.LeaderElection{Enabled: elect, LeaseName: lease,
			LeaseDuration: 10 * time.Second, RenewDeadline: 7 * time.Second, RetryPeriod: 2 * time.Second}
	}
	return []hub.Loop{
			{Name: "controller manager", Run: func(ctx context.Context, cfg *rest.Config) error {
				return manager.Run(ctx, cfg, manager.Options{LeaderElection: election(manager.LeaseName),
					NodeLifecycle: nodelifecycle.Config{ClusterCIDR: clusterCIDR}})
			}},
			{Name: "gitops", Run: func(ctx context.Context, cfg *rest.Config) error {
				// Its writes are recorded in managedFields under this name
				// (and audited with it): the manager a conflict names.
				cfg = rest.CopyConfig(cfg)
				cfg.UserAgent = GitOpsManager
				client, err := kubernetes.NewForConfig(cfg)
				if err != nil {
					return err
				}
				return controllerutil.RunCandidate(ctx, client, election(GitOpsLeaseName), func(ctx context.Context) error {
					return controller.New(controller.Config{DataDir: dataDir, Sources: sources, Hooks: hooks, Log: log}).Run(ctx, cfg)
				})
			}},
		}, map[string]http.Handler{
			controller.HooksPath: hooks,
		}, nil
}

// addSourceFlags declares the flags of a source given on the command line
// (or as keys of hub.yaml).
func addSourceFlags(f *pflag.FlagSet) {
	f.String("source-url", "", "Git repository to follow (file://, https://, ssh:// or git@host:path); creates or updates the GitSource --source-name")
	f.String("source-ref", defaults.GitSourceBranch, "branch to follow, or refs/tags/<tag>, or a full commit hash")
	f.StringSlice("source-path", nil, "paths in the repository to apply (repeatable; default: the whole tree)")
	f.Duration("source-interval", defaults.GitSourceInterval, "how often to ask the repository for a new commit")
	f.String("source-name", api.NamespaceSystem+"/default", "namespace/name of the GitSource made from --source-url")
	f.String("source-secret", "", "Secret (in the source's namespace) with the repository's credentials")
	f.String("source-webhook-secret", "", "Secret (in the source's namespace) whose \"token\" signs webhooks to /hooks/git/<namespace>/<name>")
}

var fullHash = regexp.MustCompile(`^(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$`)

func sourcesFromFlags(v *viper.Viper) ([]v1alpha1.GitSource, error) {
	url := v.GetString("source-url")
	if url == "" {
		return nil, nil
	}
	ns, name, ok := strings.Cut(v.GetString("source-name"), "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--source-name %q: want namespace/name, e.g. flotilla-system/default", v.GetString("source-name"))
	}
	gs := v1alpha1.GitSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	gs.Spec.URL = url
	switch ref := v.GetString("source-ref"); {
	case fullHash.MatchString(ref):
		gs.Spec.Ref.Commit = strings.ToLower(ref)
	case strings.HasPrefix(ref, "refs/tags/"):
		gs.Spec.Ref.Tag = strings.TrimPrefix(ref, "refs/tags/")
	default:
		gs.Spec.Ref.Branch = strings.TrimPrefix(ref, "refs/heads/")
	}
	gs.Spec.Paths = v.GetStringSlice("source-path")
	gs.Spec.Interval = &metav1.Duration{Duration: v.GetDuration("source-interval")}
	if s := v.GetString("source-secret"); s != "" {
		gs.Spec.SecretRef = &v1alpha1.LocalObjectReference{Name: s}
	}
	if s := v.GetString("source-webhook-secret"); s != "" {
		gs.Spec.WebhookSecretRef = &v1alpha1.LocalObjectReference{Name: s}
	}
	defaults.Default(&gs)
	if errs := validation.ValidateCreate(&gs, validation.Options{}); len(errs) > 0 {
		return nil, fmt.Errorf("the source given with --source-*: %w", errs.ToAggregate())
	}
	if gs.Spec.Interval.Duration < time.Second {
		return nil, fmt.Errorf("--source-interval %s: must be at least 1s", gs.Spec.Interval.Duration)
	}
	return []v1alpha1.GitSource{gs}, nil
}
