package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/image"
	"flotilla.dev/flotilla/api/validation"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/pki"
	"flotilla.dev/flotilla/internal/config"
	"flotilla.dev/flotilla/internal/configcheck"
	"flotilla.dev/flotilla/internal/memlimit"
)

// DefaultConfigFile is the file serve reads unless --config names another.
const DefaultConfigFile = "/etc/flotilla/hub.yaml"

// newConfig is `flotilla-hub config check`: the file is read and checked
// as serve reads it, and nothing is started or written.
func newConfig() *cobra.Command {
	return configcheck.Command("flotilla-hub serve",
		"the --source-* GitSource, --tls-san names, --allow-tags patterns, the listen address, the data dir, the store and pod security settings",
		DefaultConfigFile, checkConfig)
}

func checkConfig(file string, out io.Writer) error {
	serve := newServe() // its flags are the file's keys
	return configcheck.File(file, configcheck.Options{Flags: serve.Flags(), Help: "flotilla-hub serve --help"},
		func() error { return validateConfig(serve, file) }, out)
}

// validateConfig runs serve's own checks (the config file, the
// --source-* GitSource, the serving certificate's names) and checks what
// hub.New would only find out by opening and listening.
func validateConfig(serve *cobra.Command, file string) error {
	v, err := config.Load(serve, file, true)
	if err != nil {
		return err
	}
	var errs []error
	if _, err := sourcesFromFlags(v); err != nil {
		errs = append(errs, err)
	}
	if _, err := api.ParseClusterCIDRs(v.GetString("cluster-cidr")); err != nil {
		errs = append(errs, fmt.Errorf("--cluster-cidr: %w", err))
	}
	errs = append(errs, configcheck.LogLevel(v.GetString("log-level")))
	switch dir := v.GetString("data-dir"); {
	case dir == "":
		errs = append(errs, errors.New("--data-dir is empty; the hub keeps state.db, pki/ and admin.kubeconfig there (default /var/lib/flotilla/hub)"))
	case !filepath.IsAbs(dir):
		errs = append(errs, fmt.Errorf("--data-dir %q must be an absolute path", dir))
	}
	if err := listenAddr(v.GetString("listen")); err != nil {
		errs = append(errs, err)
	}
	if u := v.GetString("advertise-url"); u != "" {
		if p, err := url.Parse(u); err != nil || p.Scheme != "https" || p.Host == "" {
			errs = append(errs, fmt.Errorf("--advertise-url %q: want https://HOST:PORT, the address devices and people reach the API on", u))
		}
	}
	if err := (image.Policy{AllowTags: v.GetStringSlice("allow-tags")}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--allow-tags: %w", err))
	}
	if err := checkSANs(v.GetStringSlice("tls-san")); err != nil {
		errs = append(errs, fmt.Errorf("--tls-san: %w", err))
	}
	errs = append(errs, checkStore(v.GetString("store"), etcdFromFlags(v)))
	if _, err := memlimit.Parse(v.GetString("memory-limit")); err != nil {
		errs = append(errs, fmt.Errorf("--memory-limit: %w", err))
	}
	if err := (validation.PodSecurity{Default: v.GetString("pod-security-default")}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--pod-security-default: %w", err))
	}
	return errors.Join(errs...)
}

// checkStore checks the store settings as far as can be done without
// connecting to etcd.
func checkStore(kind string, e hub.EtcdConfig) error {
	switch kind {
	case "", hub.StoreBolt:
		if len(e.Endpoints) > 0 {
			return fmt.Errorf("--etcd-endpoints is set but --store is %q: set --store etcd to use etcd", kind)
		}
		return nil
	case hub.StoreEtcd:
	default:
		return fmt.Errorf("--store %q: want %s or %s", kind, hub.StoreBolt, hub.StoreEtcd)
	}
	var errs []error
	if len(e.Endpoints) == 0 {
		errs = append(errs, errors.New("--store etcd needs --etcd-endpoints (the etcd members' client URLs)"))
	}
	for _, ep := range e.Endpoints {
		if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--etcd-endpoints: %q is not http(s)://HOST:PORT", ep))
		}
	}
	for flag, file := range map[string]string{"--etcd-cafile": e.CAFile, "--etcd-certfile": e.CertFile, "--etcd-keyfile": e.KeyFile} {
		if file == "" {
			continue
		}
		if _, err := os.Stat(file); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", flag, err))
		}
	}
	if (e.CertFile == "") != (e.KeyFile == "") {
		errs = append(errs, errors.New("--etcd-certfile and --etcd-keyfile go together: give both, or neither"))
	}
	if e.Prefix != "" && (!strings.HasPrefix(e.Prefix, "/") || strings.HasSuffix(e.Prefix, "/")) {
		errs = append(errs, fmt.Errorf("--etcd-prefix %q must start with / and not end with one", e.Prefix))
	}
	return errors.Join(errs...)
}

func listenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		var n uint64
		if n, err = strconv.ParseUint(port, 10, 16); err == nil && n == 0 {
			err = errors.New("port 0 picks a new port at every start")
		}
	}
	if err != nil {
		return fmt.Errorf("--listen %q: %w (want HOST:PORT or :PORT, e.g. 0.0.0.0:6443)", addr, err)
	}
	return nil
}

// checkSANs has pki validate the serving certificate's names, in a
// throwaway directory: the names are refused there before anything is
// made, and a good set costs one small CA that is removed again.
func checkSANs(sans []string) error {
	if len(sans) == 0 {
		return nil
	}
	dir, err := os.MkdirTemp("", "flotilla-config-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, err = pki.LoadOrCreate(filepath.Join(dir, "pki"), pki.Options{SANs: sans, Logger: slog.New(slog.DiscardHandler)})
	return err
}
