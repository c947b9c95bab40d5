// Package config binds a command's flags to viper so that every key can
// come, in rising priority, from the config file, the FLOTILLA_<KEY>
// environment variable, or the flag.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Load builds a viper for cmd's flags, reading file (when it exists, or
// failing when it was asked for explicitly and does not).
func Load(cmd *cobra.Command, file string, explicit bool) (*viper.Viper, error) {
	v := viper.New()
	v.SetEnvPrefix("FLOTILLA")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_", ".", "_"))
	v.AutomaticEnv()
	var bindErr error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err := v.BindPFlag(f.Name, f); err != nil && bindErr == nil {
			bindErr = err
		}
	})
	if bindErr != nil {
		return nil, bindErr
	}
	if file != "" {
		if _, err := os.Stat(file); err == nil {
			v.SetConfigFile(file)
			v.SetConfigType("yaml")
			if err := v.ReadInConfig(); err != nil {
				return nil, fmt.Errorf("reading the config file %s: %w (fix the YAML or point --config elsewhere)", file, err)
			}
			if err := checkKeys(v, cmd, file); err != nil {
				return nil, err
			}
		} else if explicit || !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reading the config file %s: %w", file, err)
		}
	}
	return v, nil
}

// checkKeys refuses unknown keys in the file: a misspelt key silently
// ignored is a device configured wrongly in the field.
func checkKeys(v *viper.Viper, cmd *cobra.Command, file string) error {
	known := map[string]bool{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
	for _, k := range v.AllKeys() {
		top := strings.SplitN(k, ".", 2)[0]
		if !known[top] && !known[k] {
			return fmt.Errorf("the config file %s has an unknown key %q; known keys are the command's flags (see --help)", file, k)
		}
	}
	return nil
}
