package ctl

import (
	"fmt"

	"github.com/spf13/cobra"

	"flotilla.dev/flotilla/internal/version"
)

func (a *App) versionCommand() *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the versions of flotctl and of the hub",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(a.Out, "Client Version: %s\n", version.String("flotctl"))
			if clientOnly {
				return nil
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			info, err := c.Typed.Discovery().ServerVersion()
			if err != nil {
				return err
			}
			fmt.Fprintf(a.Out, "Server Version: %s (commit %s, %s, %s)\n", info.GitVersion, info.GitCommit, info.GoVersion, info.Platform)
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print only flotctl's version, without asking the hub")
	return cmd
}
