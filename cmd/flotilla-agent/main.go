package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"flotilla.dev/flotilla/agent/agent"
	"flotilla.dev/flotilla/agent/join"
	"flotilla.dev/flotilla/agent/node"
	"flotilla.dev/flotilla/agent/server"
	"flotilla.dev/flotilla/agent/static"
	"flotilla.dev/flotilla/agent/stats"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/api/image"
	"flotilla.dev/flotilla/internal/config"
	"flotilla.dev/flotilla/internal/hubconn"
	"flotilla.dev/flotilla/internal/version"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/registry/trust"
)

// DefaultConfigFile is read when it exists (--config names another).
const DefaultConfigFile = "/etc/flotilla/agent.yaml"

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
		Use:   "flotilla-agent",
		Short: "The Flotilla agent: runs the pods its hub binds to this device",
		Long: `The Flotilla agent registers this device as a Node of its hub and runs the
pods bound to it on containerd, and the static pods in --manifests-dir. With
no hub (no --hub, --token or --kubeconfig) it runs the static pods alone.

Run it with "flotilla-agent run" (or, as the kubelet, with flags only).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
	}
	run := newRun()
	// Bare flags run the agent, as the kubelet does: the root command
	// carries the run command's flags.
	root.Flags().AddFlagSet(run.Flags())
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if cmd.Flags().NFlag() == 0 {
			if _, err := os.Stat(DefaultConfigFile); err != nil {
				return cmd.Help()
			}
		}
		return runAgent(cmd)
	}
	root.AddCommand(run, newVersion(), newCleanup(), newPods(), newConfig())
	return root
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version.String("flotilla-agent"))
		},
	}
}

func newRun() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent",
		Long: `Run the agent. Every flag is also a key in the config file
(/etc/flotilla/agent.yaml) and an environment variable FLOTILLA_<KEY>
(dashes become underscores: FLOTILLA_NODE_NAME). In the file, labels may
also be a map, and registries configures registry hosts:

  labels: {site: berlin, line: "3"}
  registries:
    hosts:
      registry.local:5000: {plainHTTP: true}
  trust:                 # keys in --trust-dir; first matching rule wins
    policy:
    - {images: "registry.local:5000/team-a/*", keys: [team-a.pub]}
    - {images: "registry.local:5000/tools/*", unverified: true}
  images:
    allowTags: ["registry.local:5000/dev/*"]   # default: digests only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAgent(cmd) },
	}
	f := cmd.Flags()
	addDeviceFlags(f) // config, data-dir, containerd-*, cni-*, log-dir
	f.String("hub", "", "URL of the hub's API (overrides the kubeconfig's server); several, comma-separated, for hubs sharing an etcd: the agent uses whichever answers")
	f.String("token", "", "join token from 'flotilla-hub token create'")
	f.String("ca-hash", "", "sha256:HASH of the hub's CA, pinned when joining with --token")
	f.String("kubeconfig", "", "kubeconfig with the agent's credentials for the hub")
	f.String("node-name", defaultNodeName(), "name of this device's Node")
	f.String("labels", "", "labels of the Node: k=v,k2=v2")
	f.String("node-ip", "", "address the hub reaches this device on (default: the default route's)")
	f.String("server-listen", server.DefaultListen, "HTTPS address of the agent server (logs for the hub)")
	f.Int("max-pods", node.DefaultMaxPods, "pods this device runs at most")
	f.Bool("metrics", true, "read the device's and its pods' CPU, memory and disk usage: served on the agent's /metrics and reported to the hub (kubectl top, flotctl fleet status); false saves the agent the reading")
	f.Duration("usage-interval", stats.DefaultReportInterval, "how often the device reports its usage to the hub (with --metrics)")
	f.String("containerd-root", agent.DefaultContainerdRoot, "containerd's root directory, whose filesystem the device reports beside the data dir's")
	f.String("log-level", "info", "debug, info, warn or error")
	f.String("memory-limit", DefaultMemoryLimit, "soft limit of the agent's Go memory (as GOMEMLIMIT: 64MiB, 1GiB), past which it collects garbage harder; off for the Go runtime's own (GOMEMLIMIT)")
	f.String("manifests-dir", static.DefaultDir, "directory of static pods (*.yaml): they run with or without a hub")
	f.String("trust-dir", agent.DefaultTrustDir, "directory of cosign public keys (*.pub): when it holds any, every image must be signed by one of them")
	// registries is a config-file key only (a map); declared so that the
	// file's unknown-key check accepts it.
	f.String("registries", "", "registry hosts (config file only; see --help)")
	_ = f.MarkHidden("registries")
	f.String("trust", "", "which keys sign which images (config file only; see --help)")
	_ = f.MarkHidden("trust")
	f.String("images", "", "which images may run by tag (config file only; see --help)")
	_ = f.MarkHidden("images")
	return cmd
}

// runAgent reads the configuration of cmd's flags and runs the agent.
func runAgent(cmd *cobra.Command) error {
	flags := cmd.Flags()
	cfgFile, _ := flags.GetString("config")
	v, err := config.Load(cmd, cfgFile, flags.Changed("config"))
	if err != nil {
		return err
	}
	cfg, err := agentConfig(v)
	if err != nil {
		return err
	}
	if err := applyMemoryLimit(v.GetString("memory-limit")); err != nil {
		return err
	}
	log := newLogger(v.GetString("log-level"))
	slog.SetDefault(log)
	cfg.Log = log
	var pace restartPacer
	for {
		a, err := agent.New(cfg)
		if err != nil {
			return err
		}
		started := time.Now()
		err = a.Run(cmd.Context())
		var why string
		switch {
		case cmd.Context().Err() != nil:
		case errors.Is(err, agent.ErrPodCIDRChanged):
			// A new start sets the pod network up on the new range.
			why = "restarting the agent to move to the new pod CIDR"
		case errors.Is(err, agent.ErrSiteChanged):
			// A new start serves the new site's endpoints.
			why = "restarting the agent to serve the node's new site"
		}
		if why != "" {
			wait := pace.next(time.Since(started))
			log.Warn(why, "err", err, "in", wait)
			select {
			case <-time.After(wait):
				continue
			case <-cmd.Context().Done():
				return nil
			}
		}
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
}

// restartPacer spaces the agent's restarts of itself: one that follows a
// run shorter than a minute waits, from 1 s doubling to 30 s. A cause
// that keeps coming back (a Node that flaps between two sites) then
// restarts the agent, its proxy rules and its watches a few times a
// minute instead of many times a second.
type restartPacer struct {
	wait time.Duration
}

func (p *restartPacer) next(ranFor time.Duration) time.Duration {
	switch {
	case ranFor >= time.Minute:
		p.wait = 0
	case p.wait == 0:
		p.wait = time.Second
	default:
		p.wait = min(2*p.wait, 30*time.Second)
	}
	return p.wait
}

// agentConfig turns the merged configuration into agent.Config.
func agentConfig(v *viper.Viper) (agent.Config, error) {
	labels, err := labelsOf(v.Get("labels"))
	if err != nil {
		return agent.Config{}, err
	}
	var regs registry.Config
	if raw := v.Get("registries"); raw != nil && raw != "" {
		if err := v.UnmarshalKey("registries", &regs); err != nil {
			return agent.Config{}, fmt.Errorf("the registries key: %w", err)
		}
	}
	var trustCfg struct{ Policy []trust.Rule }
	if raw := v.Get("trust"); raw != nil && raw != "" {
		if err := v.UnmarshalKey("trust", &trustCfg); err != nil {
			return agent.Config{}, fmt.Errorf("the trust key: %w", err)
		}
	}
	var images image.Policy
	if raw := v.Get("images"); raw != nil && raw != "" {
		if err := v.UnmarshalKey("images", &images); err != nil {
			return agent.Config{}, fmt.Errorf("the images key: %w", err)
		}
	}
	cfg := agent.Config{
		NodeName:            v.GetString("node-name"),
		DataDir:             v.GetString("data-dir"),
		ContainerdAddress:   v.GetString("containerd-address"),
		ContainerdNamespace: v.GetString("containerd-namespace"),
		Labels:              labels,
		NodeIP:              v.GetString("node-ip"),
		ServerListen:        v.GetString("server-listen"),
		CNIConfDir:          v.GetString("cni-conf-dir"),
		CNIBinDirs:          v.GetStringSlice("cni-bin-dir"),
		LogDir:              v.GetString("log-dir"),
		MaxPods:             v.GetInt("max-pods"),
		ManifestsDir:        v.GetString("manifests-dir"),
		TrustDir:            v.GetString("trust-dir"),
		TrustPolicy:         trustCfg.Policy,
		Images:              images,
		Registries:          regs,
		DisableMetrics:      !v.GetBool("metrics"),
		UsageInterval:       v.GetDuration("usage-interval"),
		ContainerdRoot:      v.GetString("containerd-root"),
	}
	kubeconfig, token := v.GetString("kubeconfig"), v.GetString("token")
	hub := v.GetString("hub")
	hubs, err := hubconn.ParseURLs(hub)
	if err != nil {
		return cfg, fmt.Errorf("--hub: %w", err)
	}
	switch {
	case kubeconfig != "":
		cfg.Credentials = agent.KubeconfigCredentials(kubeconfig, hubs...)
	case token != "" || hasIdentity(cfg.DataDir):
		cfg.Credentials = agent.JoinCredentials(join.Config{
			Hub: hub, Token: token, CAHash: v.GetString("ca-hash"),
			NodeName: cfg.NodeName, DataDir: cfg.DataDir, Log: slog.Default(),
		})
	case len(hubs) == 0:
		// No hub at all: a standalone device runs its static pods.
	default:
		return cfg, errors.New("no hub credentials: join with --hub, --token and --ca-hash (from `flotilla-hub token create`), or give --kubeconfig")
	}
	return cfg, nil
}

// hasIdentity is true when the device joined before: its identity in the
// data dir is all it needs, also while the hub is away.
func hasIdentity(dataDir string) bool {
	_, err := join.Load(dataDir)
	return err == nil
}

// labelsOf accepts "k=v,k2=v2" (flag, environment) or a map (config file).
func labelsOf(raw any) (map[string]string, error) {
	switch l := raw.(type) {
	case nil:
		return nil, nil
	case string:
		return parseLabels(l)
	case map[string]any:
		out := make(map[string]string, len(l))
		keys := make([]string, 0, len(l))
		for k := range l {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch val := l[k].(type) {
			case string:
				out[k] = val
			case bool, int, int64, float64:
				out[k] = fmt.Sprint(val)
			default:
				return nil, fmt.Errorf("label %s: value %v is not a string", k, val)
			}
		}
		return out, node.ValidateLabels(out)
	case []any:
		parts := make([]string, 0, len(l))
		for _, p := range l {
			parts = append(parts, fmt.Sprint(p))
		}
		return parseLabels(strings.Join(parts, ","))
	}
	return nil, fmt.Errorf("labels: want k=v,k2=v2 or a map, got %T", raw)
}

// parseLabels reads "k=v,k2=v2" as join tokens' labels are read, and
// checks them as labels a device may give itself.
func parseLabels(s string) (map[string]string, error) {
	l, err := agentapi.ParseLabels(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w (--labels)", node.ErrConfig, err)
	}
	return l, node.ValidateLabels(l)
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// defaultNodeName is the host's name, as a Node name must be spelled.
func defaultNodeName() string {
	hostname, _ := os.Hostname()
	return strings.ToLower(hostname)
}
