package testimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func fetch(t *testing.T, url, accept string) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return b
}

// readImage pulls an image back with plain HTTP and returns its config and
// the files of its single layer.
func readImage(t *testing.T, ref string) (ocispec.Image, map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	host, rest, _ := strings.Cut(ref, "/")
	name, dgst, ok := strings.Cut(rest, "@")
	if !ok {
		t.Fatalf("reference %q is not digest-pinned", ref)
	}
	base := "http://" + host + "/v2/" + name
	mb := fetch(t, base+"/manifests/"+dgst, ocispec.MediaTypeImageManifest)
	if digest.FromBytes(mb).String() != dgst {
		t.Fatalf("manifest digest %s, reference says %s", digest.FromBytes(mb), dgst)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		t.Fatal(err)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(fetch(t, base+"/blobs/"+m.Config.Digest.String(), ""), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != ocispec.MediaTypeImageLayerGzip {
		t.Fatalf("layers = %+v", m.Layers)
	}
	zr, err := gzip.NewReader(bytes.NewReader(fetch(t, base+"/blobs/"+m.Layers[0].Digest.String(), "")))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(zr)
	if got := digest.FromBytes(raw); len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != got {
		t.Fatalf("diff ids %v, layer %s", cfg.RootFS.DiffIDs, got)
	}
	hdrs := map[string]*tar.Header{}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs[h.Name] = h
		files[h.Name], _ = io.ReadAll(tr)
	}
	return cfg, hdrs, files
}

func TestBuildLooseProgramWithOptions(t *testing.T) {
	reg := StartRegistry(t)
	dir := t.TempDir()
	src := "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hi\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Env:          []string{"GREETING=hello"},
		Cmd:          []string{"--flag"},
		ExposedPorts: []string{"9090/tcp"},
		WorkingDir:   "/work",
		StopSignal:   "SIGINT",
		BinaryPath:   "/usr/local/bin/hi",
		Files:        map[string]string{"/etc/hi.conf": "x=1\n"},
		Tag:          "v1",
	}
	img, err := BuildImage(reg, "tools/hi", dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(img.Ref, reg.Host+"/tools/hi@sha256:") {
		t.Fatalf("ref = %q", img.Ref)
	}
	cfg, hdrs, files := readImage(t, img.Ref)
	c := cfg.Config
	if c.Entrypoint[0] != "/usr/local/bin/hi" || c.Cmd[0] != "--flag" || c.WorkingDir != "/work" || c.StopSignal != "SIGINT" {
		t.Fatalf("config = %+v", c)
	}
	if _, ok := c.ExposedPorts["9090/tcp"]; !ok || !hasKey(c.Env, "PATH") || !hasKey(c.Env, "GREETING") {
		t.Fatalf("config = %+v", c)
	}
	if cfg.OS != "linux" || cfg.Architecture == "" {
		t.Fatalf("platform = %s/%s", cfg.OS, cfg.Architecture)
	}
	for _, d := range []string{"tmp/", "usr/", "usr/local/", "usr/local/bin/", "etc/"} {
		if hdrs[d] == nil || hdrs[d].Typeflag != tar.TypeDir {
			t.Errorf("layer lacks directory %s", d)
		}
	}
	if hdrs["tmp/"].Mode != 0o1777 || hdrs["usr/local/bin/hi"].Mode != 0o755 {
		t.Errorf("modes: tmp %o, binary %o", hdrs["tmp/"].Mode, hdrs["usr/local/bin/hi"].Mode)
	}
	if string(files["etc/hi.conf"]) != "x=1\n" {
		t.Errorf("extra file = %q", files["etc/hi.conf"])
	}
	f, err := elf.NewFile(bytes.NewReader(files["usr/local/bin/hi"]))
	if err != nil {
		t.Fatalf("binary is not ELF: %v", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("binary is dynamically linked; want static")
		}
	}
	// The tag points at the same manifest.
	tagged := fetch(t, fmt.Sprintf("%s/v2/tools/hi/manifests/v1", reg.URL()), ocispec.MediaTypeImageManifest)
	if digest.FromBytes(tagged).String() != img.Digest {
		t.Fatal("tag v1 does not point at the pushed digest")
	}
}

func TestAppIsCachedAndRunnable(t *testing.T) {
	ref := App(t)
	if again := App(t); again != ref {
		t.Fatalf("second App() = %s, first %s", again, ref)
	}
	cfg, _, files := readImage(t, ref)
	if cfg.Config.Entrypoint[0] != "/testapp" || len(files["testapp"]) == 0 {
		t.Fatalf("entrypoint %v, binary %d bytes", cfg.Config.Entrypoint, len(files["testapp"]))
	}
	if _, ok := cfg.Config.ExposedPorts["8080/tcp"]; !ok {
		t.Fatal("port 8080/tcp not exposed")
	}
	// The binary really is the test app: its helper mode runs here.
	bin := filepath.Join(t.TempDir(), "testapp")
	os.WriteFile(bin, files["testapp"], 0o755)
	out, err := execOutput(bin, "echo", "from", "image")
	if err != nil || out != "from image\n" {
		t.Fatalf("testapp echo = %q, %v", out, err)
	}
}

func TestCrossArchitecture(t *testing.T) {
	arch := "arm64"
	if os.Getenv("GOARCH") == arch || strings.Contains(os.Getenv("GOHOSTARCH"), arch) {
		arch = "amd64"
	}
	img, err := BuildImage(SharedRegistry(t), "testapp-"+arch, AppPackage, Options{Arch: arch})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, files := readImage(t, img.Ref)
	f, err := elf.NewFile(bytes.NewReader(files["testapp-"+arch]))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]elf.Machine{"arm64": elf.EM_AARCH64, "amd64": elf.EM_X86_64}[arch]
	if cfg.Architecture != arch || f.Machine != want {
		t.Fatalf("image arch %s, ELF machine %s; want %s", cfg.Architecture, f.Machine, arch)
	}
}

func TestBuildErrorIsClear(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\nfunc main() { undefined() }\n"), 0o644)
	_, err := BuildImage(SharedRegistry(t), "broken", dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "undefined") {
		t.Fatalf("err = %v, want the compiler's message", err)
	}
}

func execOutput(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).Output()
	return string(out), err
}
