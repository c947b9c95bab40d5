package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// App is one run of flotctl: its streams, its environment and how it
// reaches the hub. Tests build one with fake clients.
type App struct {
	In       io.Reader
	Out, Err io.Writer
	Getenv   func(string) string
	Now      func() time.Time
	// Connect builds the clients the flags select; nil means the real hub.
	Connect func(*ConfigFlags) (*Clients, error)

	flags   ConfigFlags
	clients *Clients
}

// NewApp is flotctl on the process's own streams and environment.
func NewApp() *App {
	return &App{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv, Now: time.Now}
}

// errReported means the command already wrote its errors to stderr and only
// the exit code is left to set.
var errReported = errors.New("errors reported")

// Main runs flotctl with args and returns the process exit code.
func Main(ctx context.Context, a *App, args []string) int {
	cmd := a.Command()
	cmd.SetArgs(args)
	cmd.SetIn(a.In)
	cmd.SetOut(a.Out)
	cmd.SetErr(a.Err)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	if !errors.Is(err, errReported) {
		fmt.Fprintln(a.Err, ErrorMessage(err))
	}
	return 1
}

// ErrorMessage phrases an error as kubectl does: "Error from server
// (NotFound): pods "x" not found" for the hub's answers, "error: ..." for
// the rest.
func ErrorMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		switch {
		case s.Reason == metav1.StatusReasonUnauthorized:
			return "error: You must be logged in to the server (" + s.Message + ")"
		case s.Reason != "":
			return fmt.Sprintf("Error from server (%s): %s", s.Reason, s.Message)
		default:
			return "Error from server: " + s.Message
		}
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			host := uerr.URL
			if u, perr := url.Parse(uerr.URL); perr == nil {
				host = u.Host
			}
			return fmt.Sprintf("The connection to the server %s was refused - is the hub running, and is this the right address?", host)
		}
		return "Unable to connect to the server: " + uerr.Err.Error()
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "error: ") {
		return msg
	}
	return "error: " + msg
}

// Command builds flotctl's command tree.
func (a *App) Command() *cobra.Command {
	root := &cobra.Command{
		Use:   "flotctl",
		Short: "flotctl watches and steers a Flotilla fleet",
		Long: "flotctl talks to a Flotilla hub. It reads like kubectl where they overlap (get, describe,\n" +
			"rollout, logs, apply) and adds what a fleet needs: `flotctl fleet status` shows the whole\n" +
			"fleet on one screen, and `flotctl describe` ends with a Diagnosis that names who owns the\n" +
			"stage where something is stuck.",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.flags.Kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default $FLOTILLA_KUBECONFIG, else $KUBECONFIG, else ~/.flotilla/config)")
	pf.StringVar(&a.flags.Context, "context", "", "the kubeconfig context to use")
	pf.StringVar(&a.flags.Hub, "hub", "", "the hub's URL instead of the kubeconfig's server; several, comma-separated, for hubs sharing an etcd (default $FLOTILLA_HUB)")
	pf.StringVarP(&a.flags.Namespace, "namespace", "n", "", "the namespace (default: the context's, else \"default\")")
	root.AddCommand(a.getCommand(), a.describeCommand(), a.fleetCommand(), a.rolloutCommand(), a.logsCommand(),
		a.applyCommand(), a.deleteCommand(), a.reconcileCommand(), a.versionCommand(), a.completionCommand(root))
	return root
}

// addAllNamespaces adds -A to the commands where it means something.
func (a *App) addAllNamespaces(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&a.flags.AllNamespaces, "all-namespaces", "A", false, "act on every namespace")
}

// connect returns the clients, built once per run.
func (a *App) connect() (*Clients, error) {
	if a.clients != nil {
		return a.clients, nil
	}
	connect := a.Connect
	if connect == nil {
		connect = func(f *ConfigFlags) (*Clients, error) {
			cfg, ns, err := f.RESTConfig(a.Getenv)
			if err != nil {
				return nil, err
			}
			return NewClients(cfg, ns)
		}
	}
	c, err := connect(&a.flags)
	if err != nil {
		return nil, err
	}
	if a.flags.Namespace != "" {
		c.Namespace = a.flags.Namespace
	}
	if c.Namespace == "" {
		c.Namespace = metav1.NamespaceDefault
	}
	a.clients = c
	return c, nil
}

// namespace is the namespace a command acts in: "" with -A.
func (a *App) namespace(c *Clients) string {
	if a.flags.AllNamespaces {
		return metav1.NamespaceAll
	}
	return c.Namespace
}

func (a *App) now() time.Time {
	if a.Now == nil {
		return time.Now()
	}
	return a.Now()
}

// report writes one error to stderr for commands that go on after it.
func (a *App) report(err error) {
	fmt.Fprintln(a.Err, ErrorMessage(err))
}
