package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/auth"
	"flotilla.dev/flotilla/hub/join"
	"flotilla.dev/flotilla/hub/pki"
)

func newKubeconfig() *cobra.Command {
	cmd := &cobra.Command{Use: "kubeconfig", Short: "Issue kubeconfigs for people"}
	cmd.AddCommand(newKubeconfigCreate())
	return cmd
}

func newKubeconfigCreate() *cobra.Command {
	var (
		af     adminFlags
		user   string
		role   string
		ttl    time.Duration
		out    string
		server string
	)
	cmd := &cobra.Command{
		Use:   "create --user NAME --role viewer|admin",
		Short: "Write a kubeconfig with a fresh client certificate",
		Long: `Write a kubeconfig for a person, with a new key made here and a client
certificate the hub signs for it. Roles: admin (everything), viewer (read
everything except Secrets).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if user == "" {
				return fmt.Errorf("--user is required")
			}
			groups, err := auth.GroupsForRole(role)
			if err != nil {
				return fmt.Errorf("--role: %w", err)
			}
			if out == "" {
				out = user + ".kubeconfig"
			}
			cfg, err := af.config()
			if err != nil {
				return err
			}
			if server == "" {
				server = cfg.Host
			}
			csrPEM, keyPEM, err := agentapi.NewCSR(user, groups)
			if err != nil {
				return err
			}
			body, err := json.Marshal(join.UserRequest{User: user, Role: role, CSR: string(csrPEM), TTL: ttl.String()})
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			raw, err := cs.CoreV1().RESTClient().Post().AbsPath(join.PathUser).SetHeader("Content-Type", "application/json").
				Body(body).Do(cmd.Context()).Raw()
			if err != nil {
				return fmt.Errorf("asking the hub at %s to sign the certificate: %w", cfg.Host, err)
			}
			var resp agentapi.CertificateResponse
			if err := json.Unmarshal(raw, &resp); err != nil {
				return fmt.Errorf("decoding the hub's answer to the signing request: %w", err)
			}
			if resp.Certificate == "" {
				return fmt.Errorf("the hub at %s answered the signing request without a certificate", cfg.Host)
			}
			if err := pki.WriteKubeconfig(out, server, cfg.CAData, []byte(resp.Certificate), keyPEM, user); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: user %s, role %s, valid for %s\n", out, user, role, ttl)
			return nil
		},
	}
	af.add(cmd)
	f := cmd.Flags()
	f.StringVar(&user, "user", "", "the person's user name")
	f.StringVar(&role, "role", auth.RoleViewer, "viewer or admin")
	f.DurationVar(&ttl, "ttl", join.DefaultUserCertTTL, "certificate lifetime")
	f.StringVarP(&out, "output", "o", "", "file to write (default NAME.kubeconfig)")
	f.StringVar(&server, "server", "", "hub URL to put in the kubeconfig (default: the admin kubeconfig's)")
	return cmd
}
