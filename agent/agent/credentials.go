package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"flotilla.dev/flotilla/agent/join"
	"flotilla.dev/flotilla/internal/hubconn"
)

// KubeconfigCredentials reads the hub client config from a kubeconfig
// file; hubURLs, when given, replace the server it names (--hub): with
// several, the agent reaches whichever of them answers (hubconn).
func KubeconfigCredentials(path string, hubURLs ...string) Credentials {
	hubs := nonEmpty(hubURLs)
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
		first := ""
		if len(hubs) > 0 {
			first = hubs[0]
		}
		cfg, err := clientcmd.BuildConfigFromFlags(first, path)
		if err != nil {
			return nil, fmt.Errorf("%w: the kubeconfig %s: %v", ErrConfig, path, err)
		}
		if _, err := hubconn.Apply(cfg, hubs, nil); err != nil {
			return nil, fmt.Errorf("%w: --hub: %v", ErrConfig, err)
		}
		// A device talks to its hub in short, frequent requests; the
		// default 5 QPS would queue a burst of pod status writes.
		cfg.QPS, cfg.Burst = 50, 100
		cfg.UserAgent = "flotilla-agent"
		cfg.Wrap(join.WithSmallHeaderTable)
		return cfg, nil
	}
}

// JoinCredentials joins the fleet with a token the first time (the key is
// made on the device and never leaves it) and afterwards uses the identity
// kept in the data dir, so a device that boots without its hub still has
// it. The certificate is renewed online, at 70% of its lifetime, for as
// long as ctx lives. A hub that cannot be reached at the first join is
// retried; a refusal (bad, expired or used-up token, a name joined with
// another key, a CA that does not match the pinned hash) is final.
//
// cfg.Hub may name several hubs, comma-separated (hubs sharing an etcd):
// the device joins through the first that answers, renews through any,
// and its client reaches whichever answers (hubconn).
func JoinCredentials(cfg join.Config) Credentials {
	return func(ctx context.Context) (*rest.Config, error) {
		hubs, err := hubconn.ParseURLs(cfg.Hub)
		if err != nil {
			return nil, fmt.Errorf("%w: --hub: %v", ErrConfig, err)
		}
		if len(hubs) == 0 {
			return nil, fmt.Errorf("%w: no hub URL (--hub)", ErrConfig)
		}
		backoff := time.Second
		for {
			id, err := joinAny(ctx, cfg, hubs)
			if err == nil {
				go func() {
					if err := id.Run(ctx, hubs...); err != nil && cfg.Log != nil {
						cfg.Log.Error("certificate renewal stopped", "err", err)
					}
				}()
				// Files rather than the identity's own transport: client-go
				// reloads a rotated certificate file by itself, and the CA
				// stays visible to the agent, which trusts only the hub.
				rc := &rest.Config{
					TLSClientConfig: rest.TLSClientConfig{
						CAData: id.CAPEM(), CertFile: id.CertFile(), KeyFile: id.CertFile(),
					},
					QPS: 50, Burst: 100, UserAgent: "flotilla-agent",
				}
				rc.Wrap(join.WithSmallHeaderTable)
				rc.Wrap(join.WithSessionCache(id.Sessions()))
				if _, err := hubconn.Apply(rc, hubs, cfg.Log); err != nil {
					return nil, fmt.Errorf("%w: --hub: %v", ErrConfig, err)
				}
				return rc, nil
			}
			var refused *join.RefusedError
			if errors.As(err, &refused) || errors.Is(err, join.ErrCAHashMismatch) || !retryableJoinError(err) {
				return nil, err
			}
			if cfg.Log != nil {
				cfg.Log.Warn("joining the hub failed; retrying", "hub", cfg.Hub, "retryIn", backoff, "err", err)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Minute)
		}
	}
}

// joinAny joins (or loads the identity) through the first hub that can
// be reached; a refusal from one hub is final, as every hub would answer
// the same.
func joinAny(ctx context.Context, cfg join.Config, hubs []string) (*join.Identity, error) {
	var err error
	for _, h := range hubs {
		c := cfg
		c.Hub = h
		var id *join.Identity
		if id, err = join.Join(ctx, c); err == nil || !retryableJoinError(err) {
			return id, err
		}
	}
	return nil, err
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// retryableJoinError is true for failures to reach the hub, which a device
// waits out, as opposed to configuration mistakes.
func retryableJoinError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}
