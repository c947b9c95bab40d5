package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"flotilla.dev/flotilla/agent/proxy"
	"flotilla.dev/flotilla/agent/routes"
)

// newCleanup removes what the agent wrote into the kernel: every FLOTILLA
// iptables chain and the jumps to them, and the pod routes. Run it with
// the agent stopped (a running agent writes them again).
func newCleanup() *cobra.Command {
	return &cobra.Command{
		Use:   "cleanup",
		Short: "Remove the agent's iptables chains and pod routes from this device",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := errors.Join(proxy.Cleanup(cmd.Context()), routes.Cleanup(cmd.Context()))
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "removed Flotilla's iptables chains and pod routes")
			return nil
		},
	}
}
