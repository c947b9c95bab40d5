package join

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/internal/atomicfile"
)

const (
	requestTimeout = 30 * time.Second
	maxResponse    = 1 << 20
)

// ErrCAHashMismatch: the hub presented a CA other than the pinned one. The
// device sent it nothing (no token, no CSR).
var ErrCAHashMismatch = agentapi.ErrCAHashMismatch

// RefusedError is the hub's refusal of a join or renewal, with its
// HTTP code and its explanation.
type RefusedError struct {
	Code    int
	Reason  metav1.StatusReason
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the hub refused (%d %s): %s", e.Code, e.Reason, e.Message)
}

// Config is what joining needs.
type Config struct {
	// Hub is the hub's URL, https://HOST:6443.
	Hub string
	// Token and CAHash come from `flotilla-hub token create`.
	Token  string
	CAHash string
	// NodeName is the device's name in the fleet.
	NodeName string
	// DataDir is the agent's data dir; the identity lives in DataDir/pki.
	DataDir string
	// Now is the clock for renewal; time.Now when nil.
	Now func() time.Time
	Log *slog.Logger
}

// Join returns the device's identity: the one stored in the data dir when
// there is one (no network needed), otherwise a new one obtained from the
// hub with the token.
func Join(ctx context.Context, cfg Config) (*Identity, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("join: no data dir (--data-dir)")
	}
	id, err := Load(cfg.DataDir)
	var keepKey crypto.Signer
	switch {
	case err == nil:
		if cfg.NodeName != "" && id.node != cfg.NodeName {
			return nil, fmt.Errorf("join: the data dir %s holds the identity of node %q, but --node-name is %q; use that name or another data dir",
				cfg.DataDir, id.node, cfg.NodeName)
		}
		id.configure(cfg)
		if !id.now().After(id.NotAfter()) || cfg.Token == "" {
			return id, nil
		}
		// The certificate expired (the device was away past its renewal):
		// join again with the token, keeping the key the hub recorded.
		id.log.Warn("the device certificate expired; joining again with the token", "node", id.node, "notAfter", id.NotAfter())
		keepKey, _ = id.Certificate().PrivateKey.(crypto.Signer)
	case !errors.Is(err, ErrNoIdentity):
		return nil, fmt.Errorf("join: %w", err)
	}
	if cfg.Hub == "" || cfg.Token == "" || cfg.CAHash == "" || cfg.NodeName == "" {
		return nil, errors.New("join: this device has not joined yet; give --hub, --token, --ca-hash and --node-name (from `flotilla-hub token create` on the hub)")
	}
	u, err := url.Parse(cfg.Hub)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("join: --hub %q must be https://HOST[:PORT]", cfg.Hub)
	}
	// Fetch the CA without trusting anything yet; the pinned hash is what
	// makes it trustworthy.
	insecure := &client{hub: cfg.Hub, http: &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}}}}
	caPEM, err := insecure.get(ctx, agentapi.PathCA)
	insecure.close()
	if err != nil {
		return nil, fmt.Errorf("join: fetching the hub CA from %s: %w", cfg.Hub, err)
	}
	if _, err := agentapi.CheckCAHash(caPEM, cfg.CAHash); err != nil {
		return nil, fmt.Errorf("join: refusing to talk to %s: %w", cfg.Hub, err)
	}
	pool, err := poolOf(caPEM)
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	pinned := &client{hub: cfg.Hub, http: &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}}}}
	defer pinned.close()
	csrPEM, keyPEM, err := newCSR(cfg.NodeName)
	if keepKey != nil {
		csrPEM, keyPEM, err = csrFor(cfg.NodeName, keepKey)
	}
	if err != nil {
		return nil, err
	}
	resp, err := pinned.post(ctx, agentapi.PathCSR, agentapi.JoinRequest{Token: cfg.Token, NodeName: cfg.NodeName, CSR: string(csrPEM)})
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	nodePEM := append([]byte(resp.Certificate), keyPEM...)
	dir := filepath.Join(cfg.DataDir, PKIDir)
	id, err = newIdentity(dir, caPEM, nodePEM)
	if err != nil {
		return nil, fmt.Errorf("join: the hub's certificate: %w", err)
	}
	if id.node != cfg.NodeName {
		return nil, fmt.Errorf("join: the hub signed a certificate for %q, not %q", id.node, cfg.NodeName)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	// The CA first: node.pem's presence means a complete identity.
	if err := atomicfile.Write(filepath.Join(dir, CAFile), caPEM, 0o644); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(dir, NodeFile), nodePEM, 0o600); err != nil {
		return nil, err
	}
	id.configure(cfg)
	id.log.Info("joined the fleet", "hub", cfg.Hub, "node", id.node, "notAfter", id.NotAfter(), "labels", resp.Labels)
	return id, nil
}

func (id *Identity) configure(cfg Config) {
	if cfg.Now != nil {
		id.now = cfg.Now
	}
	if cfg.Log != nil {
		id.log = cfg.Log
	}
}

func newCSR(node string) (csrPEM, keyPEM []byte, err error) {
	csrPEM, keyPEM, err = agentapi.NewCSR(agentapi.NodeUser(node), []string{agentapi.NodesGroup})
	if err != nil {
		return nil, nil, fmt.Errorf("making the device key: %w", err)
	}
	return csrPEM, keyPEM, nil
}

// csrFor makes a CSR for an existing key.
func csrFor(node string, key crypto.Signer) (csrPEM, keyPEM []byte, err error) {
	csrPEM, keyPEM, err = agentapi.CSRFor(key, agentapi.NodeUser(node), []string{agentapi.NodesGroup})
	if err != nil {
		return nil, nil, fmt.Errorf("making a CSR for the device key: %w", err)
	}
	return csrPEM, keyPEM, nil
}

type client struct {
	hub  string
	http *http.Client
}

// close lets go of the client's kept-alive connection: a join or renewal
// is one request, and an idle connection left open costs the hub a
// goroutine and buffers per device until its idle timeout.
func (c *client) close() { c.http.CloseIdleConnections() }

func (c *client) url(path string) string { return strings.TrimSuffix(c.hub, "/") + path }

func (c *client) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(path), nil)
	if err != nil {
		return nil, err
	}
	return c.do(req)
}

func (c *client) post(ctx context.Context, path string, body any) (*agentapi.CertificateResponse, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(path), bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	data, err := c.do(req)
	if err != nil {
		return nil, err
	}
	var resp agentapi.CertificateResponse
	if err := json.Unmarshal(data, &resp); err != nil || resp.Certificate == "" {
		return nil, fmt.Errorf("the hub's answer from %s is not a certificate (%v)", path, err)
	}
	return &resp, nil
}

func (c *client) do(req *http.Request) ([]byte, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("reading the hub's answer: %w", err)
	}
	if resp.StatusCode/100 == 2 {
		return data, nil
	}
	var st metav1.Status
	if json.Unmarshal(data, &st) == nil && st.Message != "" {
		return nil, &RefusedError{Code: resp.StatusCode, Reason: st.Reason, Message: st.Message}
	}
	return nil, &RefusedError{Code: resp.StatusCode, Reason: metav1.StatusReasonUnknown, Message: strings.TrimSpace(string(data))}
}
