package loader

import (
	"fmt"
	"io/fs"
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
}

func (l *load) kustomizeFS() (*kustomizeFS, error) {
	if l.kfs != nil {
		return l.kfs, nil
	}
	mem := filesys.MakeFsInMemory()
	var total int64
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
		data, err := fs.ReadFile(l.fsys, p)
		if err != nil {
			return err
		}
		total += int64(len(data))
		if total > maxKustomizeBytes {
			return fmt.Errorf("the commit holds more than %d bytes of files; kustomize builds need it in memory", maxKustomizeBytes)
		}
		return mem.WriteFile("/"+p, data)
	})
	if err != nil {
		return nil, fmt.Errorf("preparing the commit for kustomize: %w", err)
	}
	l.kfs = &kustomizeFS{fs: mem}
	return l.kfs, nil
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
	rm, err := krusty.MakeKustomizer(opts).Run(kfs.fs, "/"+dir)
	if err != nil {
		l.fail(kfile, 0, "", "kustomize build %s: %s", dir, strings.ReplaceAll(err.Error(), "\n", " "))
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
	refs := append(append(append([]string{}, k.Resources...), k.Components...), k.Bases...)
	for _, ref := range refs {
		target := path.Join(dir, ref)
		if strings.Contains(ref, "://") || !mem.Exists("/"+target) || strings.HasPrefix(target, "..") {
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
