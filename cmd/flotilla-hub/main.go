package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/image"
	"flotilla.dev/flotilla/api/validation"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/apiserver"
	"flotilla.dev/flotilla/hub/join"
	"flotilla.dev/flotilla/hub/store/etcdstore"
	"flotilla.dev/flotilla/internal/config"
	"flotilla.dev/flotilla/internal/memlimit"
	"flotilla.dev/flotilla/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "flotilla-hub",
		Short:         "The Flotilla hub: the fleet's API, controllers and GitOps sources",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServe(), newVersion(), newToken(), newKubeconfig(), newConfig(), newMigrate())
	return root
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version.String("flotilla-hub"))
		},
	}
}

func newServe() *cobra.Command {
	var cfgFile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the hub",
		Long: `Run the hub. Every flag is also a key in the config file
(/etc/flotilla/hub.yaml) and an environment variable FLOTILLA_<KEY>
(dashes become underscores: FLOTILLA_DATA_DIR).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := config.Load(cmd, cfgFile, cmd.Flags().Changed("config"))
			if err != nil {
				return err
			}
			log := newLogger(v.GetString("log-level"))
			slog.SetDefault(log)
			if err := setMemoryLimit(v.GetString("memory-limit"), log); err != nil {
				return err
			}
			hubLoops, public, err := loops(v, log)
			if err != nil {
				return err
			}
			h, err := hub.New(hub.Config{
				DataDir:            v.GetString("data-dir"),
				Store:              v.GetString("store"),
				Etcd:               etcdFromFlags(v),
				Listen:             v.GetString("listen"),
				TLSSANs:            v.GetStringSlice("tls-san"),
				AllowTagImages:     v.GetBool("allow-tag-images"),
				Images:             image.Policy{AllowTags: v.GetStringSlice("allow-tags")},
				PodSecurityDefault: v.GetString("pod-security-default"),
				NodeCertTTL:        v.GetDuration("node-cert-ttl"),
				EventTTL:           v.GetDuration("event-ttl"),
				AdvertiseURL:       v.GetString("advertise-url"),
				Profiling:          v.GetBool("profiling"),
				RunLoops:           true,
				Loops:              hubLoops,
				Public:             public,
				Log:                log,
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "flotilla-hub %s serving %s; admin kubeconfig: %s\n", version.Version, h.URL(), h.KubeconfigPath())
			return h.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgFile, "config", "/etc/flotilla/hub.yaml", "config file (YAML; keys are the flag names; empty for none)")
	f.String("data-dir", "/var/lib/flotilla/hub", "directory for state.db, pki/ and admin.kubeconfig")
	f.String("listen", "0.0.0.0:6443", "HTTPS address of the API")
	f.StringSlice("tls-san", nil, "extra DNS names or IPs for the serving certificate")
	f.String("advertise-url", "", "API URL written into kubeconfigs (default: from --listen)")
	f.Bool("allow-tag-images", false, "admit images referenced by tag instead of digest (not recommended)")
	f.StringSlice("allow-tags", nil, "repositories (globs: registry.local:5000/dev/*) whose images may be referenced by tag; every other image must be pinned by digest")
	f.String("log-level", "info", "debug, info, warn or error")
	f.String("pod-security-default", validation.PodSecurityBaseline, "Pod Security Standards level (privileged, baseline, restricted) of namespaces without the pod-security.kubernetes.io/enforce label; flotilla-system is privileged")
	f.String("cluster-cidr", api.ClusterCIDRs, "the ranges devices' pod CIDRs (/24 each) are cut from, in order, comma-separated; must not overlap "+api.ServiceCIDR+" (services); agents learn them from their Node")
	f.Duration("event-ttl", apiserver.DefaultEventTTL, "how long Events are kept after they last happened (kube-apiserver's --event-ttl)")
	f.Duration("node-cert-ttl", join.DefaultNodeCertTTL, "lifetime of the certificates devices get at join and renewal (they renew online at 70%; one that expired while offline still renews if its key is the one its Node records)")
	f.String("store", hub.StoreBolt, "where objects are kept: bbolt (DATA_DIR/state.db, one hub) or etcd (--etcd-endpoints)")
	f.StringSlice("etcd-endpoints", nil, "client URLs of the etcd members (with --store etcd): https://10.0.0.1:2379,...")
	f.String("etcd-cafile", "", "CA bundle that verifies etcd's serving certificates")
	f.String("etcd-certfile", "", "the hub's client certificate for etcd (with --etcd-keyfile)")
	f.String("etcd-keyfile", "", "the key of --etcd-certfile")
	f.String("etcd-prefix", etcdstore.DefaultPrefix, "the etcd key prefix; hubs of one fleet use the same one")
	f.String("memory-limit", memlimit.Auto, "soft limit of the hub's Go memory, past which it collects garbage harder instead of growing (the runtime's GOMEMLIMIT, which wins when set): a quantity such as 1Gi or 1536Mi (1GiB as GOMEMLIMIT writes it), 0 or off for none, or auto: 90% of the memory limit of the hub's cgroup, none when it has none")
	f.Bool("profiling", true, "serve Go's CPU, heap and goroutine profiles to admins under "+hub.PathProfiles+" (kube-apiserver's --profiling)")
	addSourceFlags(f)
	return cmd
}

// setMemoryLimit gives the runtime the --memory-limit, the cgroup's or
// GOMEMLIMIT's, and says which at start: a hub near its limit spends
// more CPU collecting, and the operator reading why should find the
// limit in the log.
func setMemoryLimit(value string, log *slog.Logger) error {
	s, err := memlimit.Parse(value)
	if err != nil {
		return fmt.Errorf("--memory-limit: %w", err)
	}
	d, err := memlimit.Choose(s, memlimit.System())
	if err != nil {
		// Only auto reads files: a cgroup the hub cannot make out
		// does not stop it.
		log.Warn("no memory limit: the cgroup's could not be read", "err", err)
		return nil
	}
	d.Apply()
	if d.Limit == 0 {
		log.Info("no memory limit: between collections the heap grows to twice what is live", "why", d.Source)
		return nil
	}
	log.Info("memory limit", "limit", memlimit.Format(d.Limit), "bytes", d.Limit, "from", d.Source)
	return nil
}

func etcdFromFlags(v *viper.Viper) hub.EtcdConfig {
	return hub.EtcdConfig{
		Endpoints: v.GetStringSlice("etcd-endpoints"),
		CAFile:    v.GetString("etcd-cafile"),
		CertFile:  v.GetString("etcd-certfile"),
		KeyFile:   v.GetString("etcd-keyfile"),
		Prefix:    v.GetString("etcd-prefix"),
	}
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}
