package loader

import (
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"path"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"
)

// kustomizationNames are the file names kustomize recognises, in its order.
var kustomizationNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// maxKustomizeBytes bounds the copy of the commit kustomize builds from.
const maxKustomizeBytes = 256 << 20

func kustomizationIn(fsys fs.FS, dir string) string {
	for _, n := range kustomizationNames {
		if st, err := fs.Stat(fsys, path.Join(dir, n)); err == nil && !st.IsDir() {
			return path.Join(dir, n)
		}
	}
	return ""
}

// kustomizeFS is the commit copied into kustomize's in-memory file system,
// made once per load and only when a kustomization is found. Kustomize
// never sees the host's disk, so a kustomization cannot read outside the
// commit.
type kustomizeFS struct {
	fs filesys.FileSystem
	// skipped are files over MaxFileSize, left out of the copy.
	skipped []string
}

func (l *load) kustomizeFS() (*kustomizeFS, error) {
	if l.kfs != nil {
		return l.kfs, nil
	}
	mem := filesys.MakeFsInMemory()
	var total int64
	var skipped []string
	err := fs.WalkDir(l.fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		// Sizes are checked before anything is read: a blob of gigabytes
		// in a followed repository must not become gigabytes of memory.
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > MaxFileSize {
			// Left out (a build that needs it says so); the rest of the
			// commit may well be manifests beside a large asset.
			skipped = append(skipped, fmt.Sprintf("%s (%d bytes)", p, info.Size()))
			return nil
		}
		if total+info.Size() > maxKustomizeBytes {
			return fmt.Errorf("the commit holds more than %d bytes of files; kustomize builds need it in memory", maxKustomizeBytes)
		}
		data, err := readAtMost(l.fsys, p, MaxFileSize)
		if err != nil {
			return err
		}
		total += int64(len(data))
		return mem.WriteFile("/"+p, data)
	})
	if err != nil {
		return nil, fmt.Errorf("preparing the commit for kustomize: %w", err)
	}
	l.kfs = &kustomizeFS{fs: mem, skipped: skipped}
	return l.kfs, nil
}

// readAtMost reads a file that may hold at most limit bytes, whatever
// its size claimed.
func readAtMost(fsys fs.FS, p string, limit int64) ([]byte, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s holds more than %d bytes", p, limit)
	}
	return data, nil
}

// kustomize builds the kustomization in dir and adds what it produces.
func (l *load) kustomize(dir, kfile string) error {
	kfs, err := l.kustomizeFS()
	if err != nil {
		return err
	}
	if problems := checkLocalOnly(kfs.fs, dir, map[string]bool{}); len(problems) > 0 {
		for _, p := range problems {
			l.fail(p.File, 0, "", "%s", p.Msg)
		}
		return nil
	}
	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = types.DisabledPluginConfig()
	// path.Join: a kustomization at the commit's root is "/", not "/.".
	rm, err := krusty.MakeKustomizer(opts).Run(kfs.fs, path.Join("/", dir))
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), "\n", " ")
		if len(kfs.skipped) > 0 {
			msg += fmt.Sprintf(" (files over %d bytes are left out of kustomize builds: %s)", MaxFileSize, strings.Join(kfs.skipped, ", "))
		}
		l.fail(kfile, 0, "", "kustomize build %s: %s", dir, msg)
		return nil
	}
	for _, r := range rm.Resources() {
		m, err := r.Map()
		if err != nil {
			l.fail(kfile, 0, "", "kustomize output: %v", err)
			continue
		}
		v, err := jsonValue(m, 0)
		if err != nil {
			l.fail(kfile, 0, "", "kustomize output: %v", err)
			continue
		}
		l.object(kfile, 0, v, nil)
	}
	return nil
}

// checkLocalOnly refuses kustomizations that reach outside the commit
// (remote bases, URLs): kustomize would fetch them with git or HTTP at
// every reconcile, from wherever they point, unpinned.
func checkLocalOnly(mem filesys.FileSystem, dir string, seen map[string]bool) []*Error {
	if seen[dir] {
		return nil
	}
	seen[dir] = true
	var kfile string
	for _, n := range kustomizationNames {
		if p := path.Join(dir, n); mem.Exists("/"+p) && !mem.IsDir("/"+p) {
			kfile = p
			break
		}
	}
	if kfile == "" {
		return nil
	}
	data, err := mem.ReadFile("/" + kfile)
	if err != nil {
		return []*Error{{File: kfile, Msg: err.Error()}}
	}
	var k types.Kustomization
	if err := sigsyaml.Unmarshal(data, &k); err != nil {
		return []*Error{{File: kfile, Line: lineOf(err), Msg: "invalid kustomization: " + err.Error()}}
	}
	var errs []*Error
	var raw map[string]any
	if err := sigsyaml.Unmarshal(data, &raw); err == nil {
		for _, r := range remoteRefs(raw) {
			errs = append(errs, &Error{File: kfile, Msg: fmt.Sprintf(
				"%s %q is not in the commit: kustomize would fetch it from the network at every reconcile; vendor it into the repository", r.field, r.value)})
		}
	}
	refs := append(append(append([]string{}, k.Resources...), k.Components...), k.Bases...)
	for _, ref := range refs {
		target := path.Join(dir, ref)
		if isRemote(ref) {
			continue // reported above
		}
		if !mem.Exists("/"+target) || strings.HasPrefix(target, "..") {
			errs = append(errs, &Error{File: kfile, Msg: fmt.Sprintf(
				"resource %q is not in the commit: remote bases and URLs are not fetched; vendor them into the repository", ref)})
			continue
		}
		if mem.IsDir("/" + target) {
			errs = append(errs, checkLocalOnly(mem, target, seen)...)
		}
	}
	return errs
}

// remoteRef is a field of a kustomization that names something outside
// the commit.
type remoteRef struct{ field, value string }

// Fields of a kustomization that name files or bases kustomize loads: a
// list of paths, or a list of objects with a path.
var (
	pathListFields = []string{"resources", "components", "bases", "crds", "configurations", "generators", "transformers", "validators", "patchesStrategicMerge"}
	pathObjFields  = []string{"patches", "patchesJson6902", "replacements"}
	genFields      = []string{"configMapGenerator", "secretGenerator"}
	// Helm charts are fetched from chart repositories by the helm binary.
	helmFields = []string{"helmCharts", "helmChartInflationGenerator", "helmGlobals"}
)

// remoteRefs lists every field of the kustomization k that would make
// kustomize reach the network: remote bases and URLs in any field that
// names a file (file sources of generators, patch and replacement paths,
// transformer and generator configs, CRDs, OpenAPI schemas), and Helm
// charts. Values that are data (literals, labels, annotations) are not
// looked at: a URL there is only text.
func remoteRefs(k map[string]any) []remoteRef {
	var out []remoteRef
	check := func(field string, v any) {
		if s, ok := v.(string); ok && isRemote(s) {
			out = append(out, remoteRef{field, s})
		}
	}
	for _, f := range pathListFields {
		for _, v := range asList(k[f]) {
			check(f, v)
		}
	}
	for _, f := range pathObjFields {
		for i, v := range asList(k[f]) {
			if m, ok := v.(map[string]any); ok {
				check(fmt.Sprintf("%s[%d].path", f, i), m["path"])
			}
		}
	}
	if m, ok := k["openapi"].(map[string]any); ok {
		check("openapi.path", m["path"])
	}
	for _, f := range genFields {
		for i, v := range asList(k[f]) {
			m, ok := v.(map[string]any)
			if !ok {
				continue
			}
			for _, src := range []string{"files", "envs"} {
				for _, e := range asList(m[src]) {
					if s, ok := e.(string); ok {
						// "key=path" names the key the file lands under.
						if key, p, found := strings.Cut(s, "="); found && !strings.ContainsAny(key, "/:") {
							s = p
						}
						check(fmt.Sprintf("%s[%d].%s", f, i, src), s)
					}
				}
			}
			check(fmt.Sprintf("%s[%d].env", f, i), m["env"])
		}
	}
	for _, f := range helmFields {
		if v, ok := k[f]; ok && v != nil {
			out = append(out, remoteRef{f, "(Helm charts are fetched from their repository; commit the rendered manifests instead)"})
		}
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// isRemote reports whether a kustomization path names something kustomize
// fetches: a URL, or one of the forms it clones with git (host/org/repo,
// git@host:repo, a ref or a //subdir). Inline YAML documents (generator
// and transformer configs may be written inline) are not paths.
func isRemote(s string) bool {
	s = strings.TrimSpace(s)
	if s == "" || strings.Contains(s, "\n") {
		return false
	}
	// Kustomize fetches any path that parses as an http(s) URL, "http:x"
	// and "HTTPS://..." included; any other scheme is refused as well.
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		return true
	}
	if strings.Contains(s, "://") || strings.HasPrefix(s, "git@") || strings.HasPrefix(s, "ssh:") || strings.Contains(s, "?ref=") || strings.Contains(s, "?version=") {
		return true
	}
	for _, host := range []string{"github.com/", "gitlab.com/", "bitbucket.org/", "dev.azure.com/"} {
		if strings.HasPrefix(s, host) {
			return true
		}
	}
	// host.tld/org/repo//path or .../_git/...: kustomize's git forms.
	first, _, _ := strings.Cut(s, "/")
	return strings.Contains(s, "_git/") || (strings.Contains(first, ".") && first != "." && first != ".." && strings.Contains(s, "//"))
}
