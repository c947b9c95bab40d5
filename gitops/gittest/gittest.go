package gittest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Repo is a bare repository and a clone to commit from.
type Repo struct {
	// Bare is the bare repository's directory; URL serves it.
	Bare string
	URL  string
	// Work is the work tree commits are made in.
	Work string
	// Branch is the branch commits go to.
	Branch string
	// Env is added to every git command (GNUPGHOME for signing ...).
	Env []string
}

// Available says whether the git CLI can be run.
func Available() error {
	if _, err := exec.LookPath("git"); err != nil {
		return fmt.Errorf("the git CLI is not installed: %w", err)
	}
	return nil
}

// New makes a bare repository and a work tree under dir.
func New(dir string) (*Repo, error) {
	r := &Repo{Bare: filepath.Join(dir, "remote.git"), Work: filepath.Join(dir, "work"), Branch: "main"}
	r.URL = "file://" + r.Bare
	if _, err := r.git(dir, "init", "-q", "--bare", "-b", r.Branch, r.Bare); err != nil {
		return nil, err
	}
	if _, err := r.git(dir, "init", "-q", "-b", r.Branch, r.Work); err != nil {
		return nil, err
	}
	if _, err := r.Git("remote", "add", "origin", r.URL); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Repo) git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0")
	cmd.Env = append(cmd.Env, r.Env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// Git runs git in the work tree.
func (r *Repo) Git(args ...string) (string, error) { return r.git(r.Work, args...) }

// Write writes files (path relative to the work tree → content).
func (r *Repo) Write(files map[string]string) error {
	for p, c := range files {
		full := filepath.Join(r.Work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Remove deletes files from the work tree.
func (r *Repo) Remove(paths ...string) error {
	for _, p := range paths {
		if err := os.RemoveAll(filepath.Join(r.Work, filepath.FromSlash(p))); err != nil {
			return err
		}
	}
	return nil
}

// Commit stages everything, commits with extra arguments (e.g. -S) and
// pushes; it returns the new commit's hash.
func (r *Repo) Commit(msg string, extra ...string) (string, error) {
	if _, err := r.Git("add", "-A"); err != nil {
		return "", err
	}
	args := append([]string{"-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", msg}, extra...)
	if _, err := r.Git(args...); err != nil {
		return "", err
	}
	if _, err := r.Git("push", "-q", "origin", r.Branch); err != nil {
		return "", err
	}
	return r.Git("rev-parse", "HEAD")
}
