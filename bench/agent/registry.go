package agentbench

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"flotilla.dev/flotilla/test/testimage"
)

// registryProc is a docker-registry serving plain HTTP on loopback from
// memory, for the test image.
type registryProc struct {
	host string
	p    *process
}

func startRegistry(dir string) (*registryProc, error) {
	bin, err := exec.LookPath(testimage.RegistryBinary)
	if err != nil {
		return nil, fmt.Errorf("%s is not installed (apt-get install docker-registry, or scripts/install-deps.sh): %w", testimage.RegistryBinary, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	host := ln.Addr().String()
	ln.Close()
	conf := filepath.Join(dir, "registry.yml")
	body := fmt.Sprintf("version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  inmemory: {}\nhttp:\n  addr: %s\n", host)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, err
	}
	p, err := startProcess(bin, []string{"serve", conf}, nil, filepath.Join(dir, "registry.log"))
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	r := &registryProc{host: host, p: p}
	c := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := p.exited(); err != nil {
			return nil, fmt.Errorf("%s exited at start (%v): %s", bin, err, p.tail())
		}
		resp, err := c.Get("http://" + host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r, nil
			}
		}
	}
	r.stop()
	return nil, fmt.Errorf("%s on %s not ready within 10s: %s", bin, host, p.tail())
}

func (r *registryProc) stop() { r.p.stop(5 * time.Second) }
