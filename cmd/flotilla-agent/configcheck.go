package main

import (
	"errors"
	"io"
	"log/slog"
	"reflect"

	"github.com/spf13/cobra"

	"flotilla.dev/flotilla/agent/agent"
	"flotilla.dev/flotilla/api/image"
	"flotilla.dev/flotilla/internal/config"
	"flotilla.dev/flotilla/internal/configcheck"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/registry/trust"
)

// newConfig is `flotilla-agent config check`: the file is read and
// validated by the code run uses, and nothing is started.
func newConfig() *cobra.Command {
	return configcheck.Command("flotilla-agent run",
		"a node name that is not a DNS name, a relative path, a hub without credentials, bad labels, registries, trust policy or image policy",
		DefaultConfigFile, checkConfig)
}

func checkConfig(file string, out io.Writer) error {
	run := newRun() // its flags are the file's keys
	return configcheck.File(file, configcheck.Options{
		Flags: run.Flags(),
		Shapes: map[string]configcheck.Shape{
			"labels":     {Scalar: true, List: true, Map: true},
			"registries": {Struct: reflect.TypeFor[registry.Config]()},
			// As agentConfig decodes them.
			"trust":  {Struct: reflect.TypeFor[struct{ Policy []trust.Rule }]()},
			"images": {Struct: reflect.TypeFor[image.Policy]()},
		},
		Help: "flotilla-agent run --help",
	}, func() error { return validateConfig(run, file) }, out)
}

// validateConfig runs what runAgent runs before the agent starts, and
// reports every error rather than the first.
func validateConfig(run *cobra.Command, file string) error {
	v, err := config.Load(run, file, true)
	if err != nil {
		return err
	}
	var errs []error
	errs = append(errs, configcheck.LogLevel(v.GetString("log-level")))
	_, err = parseMemoryLimit(v.GetString("memory-limit"))
	errs = append(errs, err)
	cfg, err := agentConfig(v)
	errs = append(errs, err)
	// agentConfig returns the configuration it made even when the
	// credentials are missing; agent.New then checks the rest of it.
	if !reflect.ValueOf(cfg).IsZero() {
		cfg.Log = slog.New(slog.DiscardHandler)
		_, err = agent.New(cfg)
		errs = append(errs, withoutSentinel(err, agent.ErrConfig))
	}
	return errors.Join(errs...)
}

// withoutSentinel drops sentinel from an error made with
// fmt.Errorf("%w: %w", sentinel, err): the report names the file
// already, and "invalid agent configuration:" would only lead its first line.
func withoutSentinel(err, sentinel error) error {
	if multi, ok := err.(interface{ Unwrap() []error }); ok {
		var rest []error
		for _, e := range multi.Unwrap() {
			if e != sentinel {
				rest = append(rest, e)
			}
		}
		return errors.Join(rest...)
	}
	return err
}
