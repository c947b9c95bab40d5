package configcheck

import (
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// Command is a daemon's `config check`: run names the command whose flags
// are the file's keys ("flotilla-hub serve"), refuses says what it refuses
// beyond unknown keys and wrong types, and check reads and checks a file.
func Command(run, refuses, defaultFile string, check func(file string, out io.Writer) error) *cobra.Command {
	daemon, verb, _ := strings.Cut(run, " ")
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check " + daemon + "'s config file",
		Args:  cobra.NoArgs,
	}
	c := &cobra.Command{
		Use:   "check",
		Short: "Check a config file as " + verb + " would read it, without starting anything",
		Long: wrap(`Check a config file as "`+run+`" would read it, without starting anything: unknown keys, values of the wrong type, and values it refuses (`+refuses+`) are reported with the file, the line and what to do, and the exit code is 1. A good file prints "ok".`) +
			"\n\nFLOTILLA_<KEY> environment variables count, as they do for " + verb + ".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			file, _ := cmd.Flags().GetString("config")
			return check(file, cmd.OutOrStdout())
		},
	}
	c.Flags().String("config", defaultFile, "the config file to check")
	cmd.AddCommand(c)
	return cmd
}

// wrap breaks text into lines of at most 72 columns, at spaces.
func wrap(text string) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(text) {
		if i > 0 && n+1+len(w) > 72 {
			b.WriteByte('\n')
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
