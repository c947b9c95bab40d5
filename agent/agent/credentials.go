package agent

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeconfigCredentials reads the hub client config from a kubeconfig
// file; hubURL, when set, replaces the server it names (--hub).
func KubeconfigCredentials(path, hubURL string) Credentials {
	return func(context.Context) (*rest.Config, error) {
		if path == "" {
			return nil, fmt.Errorf("%w: no kubeconfig given (--kubeconfig)", ErrConfig)
		}
		if _, err := os.Stat(path); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("%w: the kubeconfig %s does not exist (--kubeconfig)", ErrConfig, path)
			}
			return nil, fmt.Errorf("reading the kubeconfig: %w", err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags(hubURL, path)
		if err != nil {
			return nil, fmt.Errorf("%w: the kubeconfig %s: %v", ErrConfig, path, err)
		}
		// A device talks to its hub in short, frequent requests; the
		// default 5 QPS would queue a burst of pod status writes.
		cfg.QPS, cfg.Burst = 50, 100
		cfg.UserAgent = "flotilla-agent"
		return cfg, nil
	}
}
