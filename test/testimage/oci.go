package testimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// blob is content with its descriptor.
type blob struct {
	desc ocispec.Descriptor
	data []byte
}

func newBlob(mediaType string, data []byte) blob {
	return blob{desc: ocispec.Descriptor{MediaType: mediaType, Digest: digestOf(data), Size: int64(len(data))}, data: data}
}

func digestOf(b []byte) digest.Digest { return digest.FromBytes(b) }

// packed is an image ready to push.
type packed struct {
	config, layer, manifest blob
	err                     error
}

// pack makes a deterministic image: the same binary and options give the
// same digest, so a cached image is recognised across runs.
func pack(bin []byte, opts Options) packed {
	layerTar, err := layerTar(bin, opts)
	if err != nil {
		return packed{err: err}
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(layerTar)
	if err := zw.Close(); err != nil {
		return packed{err: err}
	}
	layer := newBlob(ocispec.MediaTypeImageLayerGzip, gz.Bytes())

	env := append([]string(nil), opts.Env...)
	if !hasKey(env, "PATH") {
		env = append([]string{defaultPath}, env...)
	}
	entry := opts.Entrypoint
	if entry == nil {
		entry = []string{opts.BinaryPath}
	}
	ports := map[string]struct{}{}
	for _, p := range opts.ExposedPorts {
		ports[p] = struct{}{}
	}
	cfg := ocispec.Image{
		Platform: ocispec.Platform{Architecture: opts.Arch, OS: "linux"},
		Config: ocispec.ImageConfig{
			User:         opts.User,
			ExposedPorts: ports,
			Env:          env,
			Entrypoint:   entry,
			Cmd:          opts.Cmd,
			WorkingDir:   opts.WorkingDir,
			Labels:       opts.Labels,
			StopSignal:   opts.StopSignal,
		},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{digestOf(layerTar)}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return packed{err: err}
	}
	config := newBlob(ocispec.MediaTypeImageConfig, cfgJSON)
	m := ocispec.Manifest{
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    config.desc,
		Layers:    []ocispec.Descriptor{layer.desc},
	}
	m.SchemaVersion = 2
	mJSON, err := json.Marshal(m)
	if err != nil {
		return packed{err: err}
	}
	return packed{config: config, layer: layer, manifest: newBlob(ocispec.MediaTypeImageManifest, mJSON)}
}

func hasKey(env []string, key string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, key+"=") {
			return true
		}
	}
	return false
}

// layerTar holds the binary, any extra files, their parent directories and
// a world-writable /tmp.
func layerTar(bin []byte, opts Options) ([]byte, error) {
	files := map[string][]byte{opts.BinaryPath: bin}
	for p, c := range opts.Files {
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("image file %q: path must be absolute", p)
		}
		files[path.Clean(p)] = []byte(c)
	}
	dirs := map[string]bool{"tmp": true}
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			dirs[strings.TrimPrefix(d, "/")] = true
		}
	}
	sort.Strings(names)
	dirNames := make([]string, 0, len(dirs))
	for d := range dirs {
		dirNames = append(dirNames, d)
	}
	sort.Strings(dirNames)

	epoch := time.Unix(0, 0)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range dirNames {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, p := range names {
		mode := int64(0o644)
		if p == opts.BinaryPath {
			mode = 0o755
		}
		c := files[p]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: mode, Size: int64(len(c)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(c); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// push uploads with the Registry V2 API: blobs (skipped when present),
// then the manifest by tag; the answer's digest must match ours.
func (p packed) push(reg *Registry, name, tag string) (Image, error) {
	if p.err != nil {
		return Image{}, fmt.Errorf("pack %s: %w", name, p.err)
	}
	c := &http.Client{Timeout: time.Minute}
	base := reg.URL() + "/v2/" + name
	for _, b := range []blob{p.layer, p.config} {
		if err := pushBlob(c, base, b); err != nil {
			return Image{}, fmt.Errorf("push %s blob %s to %s: %w", name, b.desc.Digest, reg.Host, err)
		}
	}
	req, err := http.NewRequest(http.MethodPut, base+"/manifests/"+tag, bytes.NewReader(p.manifest.data))
	if err != nil {
		return Image{}, err
	}
	req.Header.Set("Content-Type", ocispec.MediaTypeImageManifest)
	resp, err := c.Do(req)
	if err != nil {
		return Image{}, fmt.Errorf("push %s manifest: %w", name, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return Image{}, fmt.Errorf("push %s manifest: %s: %s", name, resp.Status, body)
	}
	d := p.manifest.desc.Digest
	if got := resp.Header.Get("Docker-Content-Digest"); got != "" && got != string(d) {
		return Image{}, fmt.Errorf("push %s manifest: registry computed digest %s, we computed %s", name, got, d)
	}
	return Image{
		Ref:    fmt.Sprintf("%s/%s@%s", reg.Host, name, d),
		Tagged: fmt.Sprintf("%s/%s:%s", reg.Host, name, tag),
		Digest: string(d),
		Config: p.config.data,
	}, nil
}

func pushBlob(c *http.Client, base string, b blob) error {
	resp, err := c.Head(base + "/blobs/" + string(b.desc.Digest))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	resp, err = c.Post(base+"/blobs/uploads/", "", nil)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("start upload: %s: %s", resp.Status, body)
	}
	loc, err := resp.Location()
	if err != nil {
		return fmt.Errorf("start upload: %w", err)
	}
	q := loc.Query()
	q.Set("digest", string(b.desc.Digest))
	loc.RawQuery = q.Encode()
	req, err := http.NewRequest(http.MethodPut, loc.String(), bytes.NewReader(b.data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err = c.Do(req)
	if err != nil {
		return err
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("upload: %s: %s", resp.Status, body)
	}
	return nil
}
