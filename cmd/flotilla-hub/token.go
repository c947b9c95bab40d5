package main

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/join"
)

// adminFlags find the hub's admin kubeconfig: the commands that change
// the fleet's credentials run on the hub host and go through its API (the
// store cannot be opened while the hub runs).
type adminFlags struct {
	dataDir    string
	kubeconfig string
}

func (f *adminFlags) add(cmd *cobra.Command) {
	def := os.Getenv("FLOTILLA_DATA_DIR")
	if def == "" {
		def = "/var/lib/flotilla/hub"
	}
	cmd.Flags().StringVar(&f.dataDir, "data-dir", def, "the hub's data dir (its admin.kubeconfig is used); env FLOTILLA_DATA_DIR")
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "admin kubeconfig to use instead of DATA_DIR/admin.kubeconfig")
}

func (f *adminFlags) config() (*rest.Config, error) {
	path := f.kubeconfig
	if path == "" {
		path = filepath.Join(f.dataDir, "admin.kubeconfig")
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("the admin kubeconfig %s: %w (run this on the hub host with --data-dir set to the hub's, after the hub has started once)", path, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	cfg.Timeout = 30 * time.Second
	return cfg, nil
}

// client is the admin kubeconfig's config and a clientset on it.
func (f *adminFlags) client() (*rest.Config, kubernetes.Interface, error) {
	cfg, err := f.config()
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("a client for %s: %w", cfg.Host, err)
	}
	return cfg, cs, nil
}

func caHashOf(cfg *rest.Config) (string, error) {
	block, _ := pem.Decode(cfg.CAData)
	if block == nil {
		return "", errors.New("the admin kubeconfig carries no CA certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("the admin kubeconfig's CA: %w", err)
	}
	return agentapi.HashCA(c), nil
}

func newToken() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Manage join tokens for devices"}
	cmd.AddCommand(newTokenCreate(), newTokenList(), newTokenDelete())
	return cmd
}

type tokenJSON struct {
	Token   string  `json:"token"`
	CAHash  string  `json:"caHash"`
	Expires *string `json:"expires"`
}

func newTokenCreate() *cobra.Command {
	var (
		af     adminFlags
		ttl    time.Duration
		uses   int
		labels string
		desc   string
		output string
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a join token and print it with the hub CA's hash",
		Long: `Create a join token. A device joins with it:

  flotilla-agent --hub https://HUB:6443 --token TOKEN --ca-hash HASH --node-name NAME

The token is valid for --ttl (0: until deleted) and for --uses joins (0: any
number); --labels are put on the Node of every device that joins with it.
Only a hash of the token's secret is stored on the hub.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: use text or json", output)
			}
			lbl, err := agentapi.ParseLabels(labels)
			if err != nil {
				return fmt.Errorf("--labels: %w", err)
			}
			cfg, cs, err := af.client()
			if err != nil {
				return err
			}
			hash, err := caHashOf(cfg)
			if err != nil {
				return err
			}
			tok, exp, err := join.CreateToken(cmd.Context(), cs, join.TokenOptions{TTL: ttl, Uses: uses, Labels: lbl, Description: desc}, time.Now())
			if err != nil {
				return fmt.Errorf("%w (is the hub at %s running?)", err, cfg.Host)
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				j := tokenJSON{Token: tok.String(), CAHash: hash}
				if !exp.IsZero() {
					s := exp.UTC().Format(time.RFC3339)
					j.Expires = &s
				}
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(j)
			}
			expires := "never"
			if !exp.IsZero() {
				expires = exp.UTC().Format(time.RFC3339)
			}
			usesText := "unlimited"
			if uses > 0 {
				usesText = fmt.Sprint(uses)
			}
			fmt.Fprintf(out, "token:   %s\ncaHash:  %s\nexpires: %s\nuses:    %s\n", tok, hash, expires, usesText)
			if len(lbl) > 0 {
				fmt.Fprintf(out, "labels:  %s\n", labels)
			}
			fmt.Fprintf(out, "\nOn the device:\n  flotilla-agent --hub %s --token %s --ca-hash %s --node-name NAME\n", cfg.Host, tok, hash)
			return nil
		},
	}
	af.add(cmd)
	f := cmd.Flags()
	f.DurationVar(&ttl, "ttl", join.DefaultTTL, "how long the token can be used (0: until deleted)")
	f.IntVar(&uses, "uses", 0, "how many devices may join with it (0: any number)")
	f.StringVar(&labels, "labels", "", "labels for the Node of every device that joins with it: k=v,k2=v2")
	f.StringVar(&desc, "description", "", "what the token is for")
	f.StringVarP(&output, "output", "o", "text", "text or json ({\"token\", \"caHash\", \"expires\"})")
	return cmd
}

func newTokenList() *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List join tokens (ids only; secrets are not stored)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cs, err := af.client()
			if err != nil {
				return err
			}
			toks, err := join.ListTokens(cmd.Context(), cs)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tEXPIRES\tUSES LEFT\tLABELS\tDESCRIPTION")
			for _, t := range toks {
				exp := "never"
				if t.Expires != nil {
					exp = t.Expires.UTC().Format(time.RFC3339)
					if !time.Now().Before(*t.Expires) {
						exp += " (expired)"
					}
				}
				left := "unlimited"
				if t.UsesLimit > 0 {
					left = fmt.Sprintf("%d/%d", t.UsesLeft, t.UsesLimit)
				}
				var l []string
				for k, v := range t.Labels {
					l = append(l, k+"="+v)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, exp, left, strings.Join(l, ","), t.Description)
			}
			return tw.Flush()
		},
	}
	af.add(cmd)
	return cmd
}

func newTokenDelete() *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a join token (devices that joined with it keep their identity)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, cs, err := af.client()
			if err != nil {
				return err
			}
			if err := join.DeleteToken(cmd.Context(), cs, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "join token %s deleted\n", strings.SplitN(args[0], ".", 2)[0])
			return nil
		},
	}
	af.add(cmd)
	return cmd
}
