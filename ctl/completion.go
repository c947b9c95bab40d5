package ctl

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"flotilla.dev/flotilla/api"
)

func (a *App) completionCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print a shell completion script",
		Long: "Print a shell completion script. Load it with, for example:\n" +
			"  source <(flotctl completion bash)\n" +
			"  flotctl completion zsh > \"${fpath[1]}/_flotctl\"\n" +
			"  flotctl completion fish > ~/.config/fish/completions/flotctl.fish",
		ValidArgs: []string{"bash", "zsh", "fish"},
		Args:      cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(a.Out, true)
			case "zsh":
				return root.GenZshCompletion(a.Out)
			case "fish":
				return root.GenFishCompletion(a.Out, true)
			}
			return fmt.Errorf("unsupported shell %q: choose bash, zsh or fish", args[0])
		},
	}
}

// completeKinds completes the first argument of get and describe with the
// served resource names.
func completeKinds(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, r := range api.Resources() {
		for _, n := range append([]string{r.GVR.Resource}, r.ShortNames...) {
			if strings.HasPrefix(n, toComplete) {
				out = append(out, n)
			}
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
