package volumes

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// File is one file of a configMap, secret or downwardAPI volume.
type File struct {
	Data []byte
	Mode os.FileMode
}

const dataDirName = "..data"

// validPath refuses names that would escape the volume or collide with
// the writer's own entries.
func validPath(p string) error {
	if p == "" {
		return errors.New("empty path")
	}
	if filepath.IsAbs(p) {
		return fmt.Errorf("path %q must be relative", p)
	}
	if strings.HasPrefix(p, "..") {
		return fmt.Errorf("path %q must not start with '..'", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return fmt.Errorf("path %q must not contain '..'", p)
		}
	}
	return nil
}

// WriteAtomic makes dir hold exactly payload (paths relative to dir),
// switching from the previous content in one rename. It reports whether
// anything changed.
func WriteAtomic(dir string, payload map[string]File) (bool, error) {
	clean := make(map[string]File, len(payload))
	for p, f := range payload {
		if err := validPath(p); err != nil {
			return false, err
		}
		clean[filepath.Clean(p)] = f
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	oldTS, _ := os.Readlink(filepath.Join(dir, dataDirName))
	if oldTS != "" && sameContent(filepath.Join(dir, oldTS), clean) {
		return false, ensureLinks(dir, clean, nil)
	}

	tsDir, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return false, err
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return false, err
	}
	for p, f := range clean {
		full := filepath.Join(tsDir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			os.RemoveAll(tsDir)
			return false, err
		}
		if err := os.WriteFile(full, f.Data, f.Mode.Perm()); err != nil {
			os.RemoveAll(tsDir)
			return false, err
		}
		// WriteFile's mode is filtered by the umask.
		if err := os.Chmod(full, f.Mode.Perm()); err != nil {
			os.RemoveAll(tsDir)
			return false, err
		}
	}
	tmpLink := filepath.Join(dir, "..data_tmp")
	os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(tsDir), tmpLink); err != nil {
		os.RemoveAll(tsDir)
		return false, err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataDirName)); err != nil {
		os.Remove(tmpLink)
		os.RemoveAll(tsDir)
		return false, err
	}
	var oldNames map[string]bool
	if oldTS != "" {
		oldNames = topLevel(filepath.Join(dir, oldTS))
	}
	if err := ensureLinks(dir, clean, oldNames); err != nil {
		return true, err
	}
	if oldTS != "" && oldTS != filepath.Base(tsDir) {
		if err := os.RemoveAll(filepath.Join(dir, oldTS)); err != nil {
			return true, err
		}
	}
	return true, nil
}

// ensureLinks makes a "name -> ..data/name" symlink for every top-level
// name of the payload and removes the ones only the old content had.
func ensureLinks(dir string, payload map[string]File, old map[string]bool) error {
	want := map[string]bool{}
	for p := range payload {
		want[strings.SplitN(p, string(filepath.Separator), 2)[0]] = true
	}
	for name := range want {
		link := filepath.Join(dir, name)
		target := filepath.Join(dataDirName, name)
		if cur, err := os.Readlink(link); err == nil && cur == target {
			continue
		}
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return err
		}
	}
	for name := range old {
		if !want[name] {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

func topLevel(dir string) map[string]bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

// sameContent reports whether dir holds exactly payload.
func sameContent(dir string, payload map[string]File) bool {
	seen := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		f, ok := payload[rel]
		if !ok {
			return errors.New("extra file")
		}
		info, err := d.Info()
		if err != nil || info.Mode().Perm() != f.Mode.Perm() {
			return errors.New("mode differs")
		}
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, f.Data) {
			return errors.New("content differs")
		}
		seen++
		return nil
	})
	return err == nil && seen == len(payload)
}

// sortedKeys is for deterministic error messages.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
