package pki

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigName names the cluster and the context in kubeconfigs the hub
// writes.
const KubeconfigName = "flotilla"

// WriteKubeconfig writes a standard kubeconfig (mode 0600, replaced
// atomically) with one cluster and one context named "flotilla" that reach
// serverURL trusting caPEM, and one user named user authenticating with the
// given client certificate and key, all embedded so the file can be copied
// to another machine on its own.
func WriteKubeconfig(path, serverURL string, caPEM, certPEM, keyPEM []byte, user string) error {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("pki: kubeconfig %s: server URL %q must be https://HOST[:PORT]", path, serverURL)
	}
	if user == "" {
		return fmt.Errorf("pki: kubeconfig %s: empty user name", path)
	}
	if len(caPEM) == 0 || len(certPEM) == 0 || len(keyPEM) == 0 {
		return fmt.Errorf("pki: kubeconfig %s: CA, certificate and key are all required", path)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[KubeconfigName] = &clientcmdapi.Cluster{
		Server:                   serverURL,
		CertificateAuthorityData: caPEM,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: certPEM,
		ClientKeyData:         keyPEM,
	}
	cfg.Contexts[KubeconfigName] = &clientcmdapi.Context{
		Cluster:  KubeconfigName,
		AuthInfo: user,
	}
	cfg.CurrentContext = KubeconfigName
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("pki: encode kubeconfig %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("pki: kubeconfig %s: %w", path, err)
	}
	return writeFileAtomic(path, data, 0o600)
}
