package source

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

const remoteName = "origin"

// maxPacks is how many pack files may pile up from incremental fetches
// before the clone is started afresh with one shallow fetch, which is
// cheaper than repacking with go-git.
const maxPacks = 64

// Errors a caller tells apart.
var (
	// ErrRefNotFound means the remote has no such branch or tag.
	ErrRefNotFound = errors.New("ref not found on the remote")
	// ErrCommitNotFound means the commit could not be fetched.
	ErrCommitNotFound = errors.New("commit not found")
)

// Ref selects what to follow: a commit (fetched from Branch or Tag when
// given), else a tag, else a branch.
type Ref struct {
	Branch string
	Tag    string
	Commit string
}

func (r Ref) String() string {
	switch {
	case r.Commit != "" && r.Tag != "":
		return "commit " + r.Commit + " of tag " + r.Tag
	case r.Commit != "" && r.Branch != "":
		return "commit " + r.Commit + " of branch " + r.Branch
	case r.Commit != "":
		return "commit " + r.Commit
	case r.Tag != "":
		return "tag " + r.Tag
	}
	return "branch " + r.Branch
}

// refName is the remote ref the commit is fetched from.
func (r Ref) refName() plumbing.ReferenceName {
	switch {
	case r.Tag != "":
		return plumbing.NewTagReferenceName(r.Tag)
	case r.Branch != "":
		return plumbing.NewBranchReferenceName(r.Branch)
	}
	return ""
}

// Repo is the local clone of one source, a bare repository in a
// directory of its own. One goroutine uses a Repo at a time.
type Repo struct {
	dir  string
	url  string
	repo *git.Repository
}

// Open opens or creates the clone of url kept in dir. A clone of another
// URL found there is replaced.
func Open(dir, url string) (*Repo, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	r := &Repo{dir: dir, url: url}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Repo) gitDir() string { return filepath.Join(r.dir, "repo.git") }

func (r *Repo) open() error {
	st := filesystem.NewStorageWithOptions(osfs.New(r.gitDir()), cache.NewObjectLRU(4*cache.MiByte),
		filesystem.Options{ExclusiveAccess: true})
	repo, err := git.Open(st, nil)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		repo, err = git.Init(st, nil)
	}
	if err != nil {
		return fmt.Errorf("opening the clone in %s: %w", r.gitDir(), err)
	}
	rem, err := repo.Remote(remoteName)
	switch {
	case err == nil && len(rem.Config().URLs) == 1 && rem.Config().URLs[0] == r.url:
	case err == nil:
		// The source now follows another repository: start afresh so no
		// object of the old one is ever served for the new one.
		return r.reset()
	default:
		if _, err := repo.CreateRemote(&config.RemoteConfig{Name: remoteName, URLs: []string{r.url}}); err != nil {
			return fmt.Errorf("configuring the remote: %w", err)
		}
	}
	r.repo = repo
	return nil
}

// reset deletes the clone and opens an empty one.
func (r *Repo) reset() error {
	if err := os.RemoveAll(r.gitDir()); err != nil {
		return fmt.Errorf("removing the clone %s: %w", r.gitDir(), err)
	}
	return r.open()
}

// Resolve asks the remote (ls-remote, no fetch) which commit ref names.
// A commit given without a branch or tag is its own answer.
func (r *Repo) Resolve(ctx context.Context, ref Ref, creds Credentials) (string, error) {
	if ref.Commit != "" && ref.refName() == "" {
		return strings.ToLower(ref.Commit), nil
	}
	auth, err := transportAuth(r.url, creds, r.dir)
	if err != nil {
		return "", err
	}
	rem, err := r.repo.Remote(remoteName)
	if err != nil {
		return "", fmt.Errorf("the clone's remote: %w", err)
	}
	refs, err := rem.ListContext(ctx, &git.ListOptions{Auth: auth, PeelingOption: git.AppendPeeled})
	if err != nil {
		return "", fmt.Errorf("listing the refs of %s: %w", RedactURL(r.url), cleanErr(err))
	}
	want := ref.refName()
	var hash string
	for _, rf := range refs {
		switch rf.Name() {
		case want:
			if hash == "" {
				hash = rf.Hash().String()
			}
		case want + "^{}":
			// The commit an annotated tag points at.
			hash = rf.Hash().String()
		}
	}
	if hash == "" {
		return "", fmt.Errorf("%s: %w in %s", ref, ErrRefNotFound, RedactURL(r.url))
	}
	if ref.Commit != "" {
		// Pinned: the branch or tag only says where to fetch from.
		return strings.ToLower(ref.Commit), nil
	}
	return hash, nil
}

// Has says whether commit is already in the clone.
func (r *Repo) Has(commit string) bool {
	_, err := r.repo.CommitObject(plumbing.NewHash(commit))
	return err == nil
}

// Fetch makes commit available: nothing when it is already here, else a
// shallow fetch of the ref alone. It reports whether it fetched.
func (r *Repo) Fetch(ctx context.Context, ref Ref, commit string, creds Credentials) (bool, error) {
	if r.Has(commit) {
		return false, nil
	}
	if packs, _ := filepath.Glob(filepath.Join(r.gitDir(), "objects", "pack", "*.pack")); len(packs) > maxPacks {
		if err := r.reset(); err != nil {
			return false, err
		}
	}
	auth, err := transportAuth(r.url, creds, r.dir)
	if err != nil {
		return false, err
	}
	var specs []config.RefSpec
	depth := 1
	if name := ref.refName(); name != "" && ref.Commit == "" {
		specs = []config.RefSpec{config.RefSpec(fmt.Sprintf("+%s:refs/flotilla/%s", name, strings.TrimPrefix(name.String(), "refs/")))}
	} else {
		// A pinned commit: ask for it by hash, which servers allow for
		// branch and tag tips only when configured to; otherwise fetch the
		// history it must be in (once: a pinned commit never moves).
		specs = []config.RefSpec{config.RefSpec(commit + ":refs/flotilla/pinned")}
	}
	err = r.fetch(ctx, specs, depth, auth)
	if err != nil && (ref.Commit != "") {
		if name := ref.refName(); name != "" {
			specs = []config.RefSpec{config.RefSpec(fmt.Sprintf("+%s:refs/flotilla/%s", name, strings.TrimPrefix(name.String(), "refs/")))}
		} else {
			specs = []config.RefSpec{"+refs/heads/*:refs/flotilla/heads/*", "+refs/tags/*:refs/flotilla/tags/*"}
		}
		err = r.fetch(ctx, specs, 0, auth)
	}
	if err != nil {
		return false, fmt.Errorf("fetching %s from %s: %w", ref, RedactURL(r.url), cleanErr(err))
	}
	if !r.Has(commit) {
		return true, fmt.Errorf("%w: %s is not in what %s serves for %s (it moved again, or a pinned commit is not a branch or tag tip)",
			ErrCommitNotFound, commit, RedactURL(r.url), ref)
	}
	return true, nil
}

// MaxFetchBytes bounds how much one fetch may add to a clone: a
// repository that serves more (by mistake or on purpose) is cut off
// rather than filling the hub's disk.
var MaxFetchBytes int64 = 1 << 30

// ErrFetchTooLarge ends a fetch that grew past MaxFetchBytes.
var ErrFetchTooLarge = errors.New("the fetch grew too large")

func (r *Repo) fetch(ctx context.Context, specs []config.RefSpec, depth int, auth transport.AuthMethod) error {
	ctx, stop := r.capFetch(ctx, MaxFetchBytes)
	err := r.fetchOnce(ctx, specs, depth, auth)
	if tooLarge := stop(); tooLarge != nil {
		// Nothing of it may be served later as if fetched: start afresh.
		if rerr := r.reset(); rerr != nil {
			return errors.Join(tooLarge, rerr)
		}
		return tooLarge
	}
	return err
}

// capFetch cancels ctx with ErrFetchTooLarge once the clone's object
// store has grown by more than limit bytes. It watches the disk rather
// than a transport, so it holds for https, ssh, git and file alike. stop
// ends the watch and says whether the fetch grew too large, also when it
// finished between two looks.
func (r *Repo) capFetch(ctx context.Context, limit int64) (context.Context, func() error) {
	ctx, cancel := context.WithCancelCause(ctx)
	objects := filepath.Join(r.gitDir(), "objects")
	start := dirSize(objects)
	tooLarge := func() error {
		return fmt.Errorf("%w: %s sent more than %d bytes; is this the right repository?", ErrFetchTooLarge, RedactURL(r.url), limit)
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if grown := dirSize(objects) - start; grown > limit {
					cancel(tooLarge())
					return
				}
			}
		}
	}()
	return ctx, func() error {
		close(done)
		cancel(nil)
		if cause := context.Cause(ctx); errors.Is(cause, ErrFetchTooLarge) {
			return cause
		}
		if dirSize(objects)-start > limit {
			return tooLarge()
		}
		return nil
	}
}

// dirSize is the size of the files under dir (0 where it cannot be read).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	})
	return n
}

func (r *Repo) fetchOnce(ctx context.Context, specs []config.RefSpec, depth int, auth transport.AuthMethod) error {
	err := r.repo.FetchContext(ctx, &git.FetchOptions{
		RemoteName: remoteName,
		RefSpecs:   specs,
		Depth:      depth,
		Auth:       auth,
		Tags:       git.NoTags,
		Force:      true,
	})
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil
	}
	return err
}

// Files serves the tree of commit.
func (r *Repo) Files(commit string) (*TreeFS, *object.Commit, error) {
	c, err := r.repo.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrCommitNotFound, commit, err)
	}
	t, err := c.Tree()
	if err != nil {
		return nil, nil, fmt.Errorf("reading the tree of %s: %w", commit, err)
	}
	return NewTreeFS(t, c.Committer.When), c, nil
}

// cleanErr keeps transport errors short and free of credentials: go-git's
// errors carry no secrets, but a URL with user info might appear in them.
func cleanErr(err error) error {
	if errors.Is(err, transport.ErrAuthenticationRequired) || errors.Is(err, transport.ErrAuthorizationFailed) {
		return fmt.Errorf("%w: check the credentials in spec.secretRef", err)
	}
	if errors.Is(err, transport.ErrRepositoryNotFound) {
		return fmt.Errorf("%w: check spec.url", err)
	}
	return err
}
