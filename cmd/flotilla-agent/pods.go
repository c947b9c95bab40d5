package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"flotilla.dev/flotilla/agent/agent"
	"flotilla.dev/flotilla/agent/kubelet"
	"flotilla.dev/flotilla/agent/static"
	"flotilla.dev/flotilla/internal/config"
)

// newPods shows what this device runs without asking the hub: from the
// running agent, or, when none runs, from the local store, the static
// manifests and containerd.
func newPods() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pods",
		Short: "What this device runs, with or without a hub",
		Long: `List the pods of this device: where each came from (hub, cache: the hub's
last word kept on the device, static: --manifests-dir), its phase, readiness,
restarts and the last error.

A running agent answers on DATA_DIR/agent.sock. When none runs, the list is
read from DATA_DIR/state.db, the static manifests and containerd, and says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, _ := cmd.Flags().GetString("output")
			if out != "" && out != "json" && out != "table" {
				return fmt.Errorf("--output %q: want table or json", out)
			}
			keys := &cobra.Command{Use: cmd.Use}
			keys.Flags().AddFlagSet(cmd.Flags())
			keys.Flags().AddFlagSet(newRun().Flags())
			file, _ := cmd.Flags().GetString("config")
			v, err := config.Load(keys, file, cmd.Flags().Changed("config"))
			if err != nil {
				return err
			}
			pc := agent.DeviceView{
				DataDir: v.GetString("data-dir"), ManifestsDir: v.GetString("manifests-dir"), NodeName: v.GetString("node-name"),
				ContainerdAddress: v.GetString("containerd-address"), ContainerdNamespace: v.GetString("containerd-namespace"),
			}
			rep, err := agent.DevicePods(cmd.Context(), pc)
			if err != nil {
				return err
			}
			return writeReport(cmd.OutOrStdout(), cmd.ErrOrStderr(), rep, out, pc)
		},
	}
	addDeviceFlags(cmd.Flags())
	cmd.Flags().String("manifests-dir", static.DefaultDir, "directory of static pods")
	cmd.Flags().String("node-name", defaultNodeName(), "name of this device's Node (static pods are named <name>-<node>)")
	cmd.Flags().StringP("output", "o", "table", "table or json")
	return cmd
}

// writeReport prints rep as format says: json (the report as it is, for
// scripts) or a table, headed by where the list was read from when no
// agent answered, with what could not be read on errw.
func writeReport(w, errw io.Writer, rep agent.DeviceReport, format string, pc agent.DeviceView) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if !rep.Live {
		fmt.Fprintf(w, "(no agent is running: read from %s, %s and containerd)\n", filepath.Join(pc.DataDir, "state.db"), pc.ManifestsDir)
	}
	if err := printPods(w, rep.Pods, rep.Live); err != nil {
		return err
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(errw, "warning:", p)
	}
	return nil
}

func printPods(w io.Writer, pods []kubelet.LocalPod, live bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tSOURCE\tPHASE\tREADY\tRESTARTS\tLAST ERROR")
	for _, p := range pods {
		source := p.Source
		if source == "" {
			source = "none (stopping)"
		}
		// Readiness is the probes' verdict, which only a running agent has.
		ready := "-"
		switch {
		case live && p.Ready:
			ready = "yes"
		case live:
			ready = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", p.Namespace, p.Name, source, p.Phase, ready, p.Restarts, oneLine(p.LastError))
	}
	return tw.Flush()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
