package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/auth"
	"flotilla.dev/flotilla/hub/join"
	"flotilla.dev/flotilla/hub/pki"
)

func newKubeconfig() *cobra.Command {
	cmd := &cobra.Command{Use: "kubeconfig", Short: "Issue kubeconfigs for people"}
	cmd.AddCommand(newKubeconfigCreate(), newKubeconfigRevoke())
	return cmd
}

func newKubeconfigRevoke() *cobra.Command {
	var (
		af     adminFlags
		user   string
		reason string
	)
	cmd := &cobra.Command{
		Use:   "revoke --user NAME",
		Short: "Refuse every certificate issued to a person until now",
		Long: `Refuse, from now on, every client certificate the hub issued to a person
before this moment: their kubeconfigs stop working within seconds, on every
hub of the fleet. A kubeconfig created for the same name afterwards works.

The revocation is a ConfigMap in flotilla-system (see 'revoke list');
deleting it undoes the revocation. Devices are revoked by deleting their
Node (kubectl delete node NAME); they join again with a new token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(user) == "" {
				return fmt.Errorf("--user is required: the name the kubeconfig was created for (see the user in its users: section)")
			}
			if user == pki.AdminUser {
				return fmt.Errorf("--user %s is the hub's own admin identity (admin.kubeconfig), which the hub itself uses; it cannot be revoked. Issue people their own kubeconfigs (flotilla-hub kubeconfig create) and revoke those", user)
			}
			if strings.HasPrefix(user, auth.NodePrefix) {
				return fmt.Errorf("--user %s is a device: delete its Node instead (kubectl delete node %s), which revokes its certificates", user, strings.TrimPrefix(user, auth.NodePrefix))
			}
			if strings.HasPrefix(user, "system:") {
				return fmt.Errorf("--user %s: names starting with system: are not people's; the hub issues none to revoke", user)
			}
			cfg, cs, err := af.client()
			if err != nil {
				return err
			}
			if reason == "" {
				reason = "revoked with flotilla-hub kubeconfig revoke"
			}
			r := auth.Revocation{User: user, RevokedAt: time.Now(), Reason: reason}
			if err := auth.Revoke(cmd.Context(), cs, r); err != nil {
				return fmt.Errorf("the hub at %s: %w", cfg.Host, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked every certificate of %s issued before %s (configmap %s/%s)\n",
				user, r.RevokedAt.UTC().Format(time.RFC3339), auth.RevocationNamespace, auth.RevocationName(user))
			return nil
		},
	}
	af.add(cmd)
	cmd.Flags().StringVar(&user, "user", "", "the person whose certificates are refused")
	cmd.Flags().StringVar(&reason, "reason", "", "why, kept with the revocation and shown to the refused client")
	cmd.AddCommand(newKubeconfigRevokeList())
	return cmd
}

func newKubeconfigRevokeList() *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List revoked users and devices",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, cs, err := af.client()
			if err != nil {
				return err
			}
			revs, damaged, err := auth.ListRevocations(cmd.Context(), cs)
			if err != nil {
				return fmt.Errorf("the hub at %s: %w", cfg.Host, err)
			}
			for _, err := range damaged {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", err)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "USER\tREVOKED AT\tCONFIGMAP\tREASON")
			for _, r := range revs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.User, r.RevokedAt.UTC().Format(time.RFC3339), auth.RevocationName(r.User), r.Reason)
			}
			return tw.Flush()
		},
	}
	af.add(cmd)
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
			cfg, cs, err := af.client()
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
