package gitopsbench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/gitops/applier"
	"flotilla.dev/flotilla/gitops/gittest"
	"flotilla.dev/flotilla/gitops/loader"
	"flotilla.dev/flotilla/gitops/source"
)

// Options shape the benchmark.
type Options struct {
	// Manifests is the number of manifest files (default 1000).
	Manifests int
	// WorkDir holds the repositories and clones (a temp dir by default).
	WorkDir string
	// Polls is how many no-op polls are timed (default 20; the median is
	// reported).
	Polls int
	// SkipRSS skips the fetch comparison, which runs `go run` and git.
	SkipRSS bool
}

// Results are the figures; zero when not measured.
type Results struct {
	Manifests int
	// FirstApply: ls-remote, fetch, load and apply of every object.
	FirstApply time.Duration
	// NoOpPoll: ls-remote finding the applied commit; no fetch (median).
	NoOpPoll time.Duration
	// DriftCheck: reading every object back and merging, nothing written
	// (median), which the loop does at each poll.
	DriftCheck time.Duration
	// OneChange: ls-remote, fetch, load and apply after one file changed.
	OneChange time.Duration
	// Go-git's and git's shallow fetch of the same repository, each in a
	// fresh process.
	GoGitFetch, GitFetch       time.Duration
	GoGitFetchRSS, GitFetchRSS int64 // bytes
}

// Lines are the figures, one per line, for `make bench`.
func (r Results) Lines() []string {
	out := []string{
		fmt.Sprintf("gitops %d manifests: first apply %s", r.Manifests, r.FirstApply.Round(time.Millisecond)),
		fmt.Sprintf("gitops no-op poll (ls-remote, no fetch): %s (target ≤ 50ms)", r.NoOpPoll.Round(10*time.Microsecond)),
		fmt.Sprintf("gitops drift check of %d objects (no writes): %s", r.Manifests, r.DriftCheck.Round(10*time.Microsecond)),
		fmt.Sprintf("gitops one changed file, fetched and applied: %s (target ≤ 1s)", r.OneChange.Round(time.Millisecond)),
	}
	if r.GoGitFetch > 0 {
		out = append(out,
			fmt.Sprintf("gitops shallow fetch, go-git: %s, peak RSS %.1f MiB", r.GoGitFetch.Round(time.Millisecond), float64(r.GoGitFetchRSS)/(1<<20)),
			fmt.Sprintf("gitops shallow fetch, git CLI: %s, peak RSS %.1f MiB", r.GitFetch.Round(time.Millisecond), float64(r.GitFetchRSS)/(1<<20)))
	}
	return out
}

// Run measures against the hub reached with cfg (an admin config). It
// creates ConfigMaps in the namespace "default" labelled as the source
// "default.gitops-bench", and deletes them at the end.
func Run(ctx context.Context, cfg *rest.Config, opts Options) (Results, error) {
	if opts.Manifests <= 0 {
		opts.Manifests = 1000
	}
	if opts.Polls <= 0 {
		opts.Polls = 20
	}
	res := Results{Manifests: opts.Manifests}
	if err := gittest.Available(); err != nil {
		return res, err
	}
	if opts.WorkDir == "" {
		dir, err := os.MkdirTemp("", "gitops-bench")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		opts.WorkDir = dir
	}
	g, err := gittest.New(opts.WorkDir)
	if err != nil {
		return res, err
	}
	files := map[string]string{}
	for i := 0; i < opts.Manifests; i++ {
		files[fmt.Sprintf("apps/group-%02d/cm-%04d.yaml", i%50, i)] = manifest(i, "v1")
	}
	if err := g.Write(files); err != nil {
		return res, err
	}
	if _, err := g.Commit("generated"); err != nil {
		return res, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	b := &bench{app: applier.New(dyn), ref: source.Ref{Branch: g.Branch}}
	if b.repo, err = source.Open(filepath.Join(opts.WorkDir, "clone"), g.URL); err != nil {
		return res, err
	}
	defer func() {
		// Leave the hub as it was.
		_, _ = b.app.Apply(context.WithoutCancel(ctx), applier.Request{Source: sourceLabel, Inventory: b.inv, Prune: true, AllowEmpty: true})
	}()

	start := time.Now()
	if err := b.sync(ctx); err != nil {
		return res, fmt.Errorf("first apply: %w", err)
	}
	res.FirstApply = time.Since(start)

	polls := make([]time.Duration, 0, opts.Polls)
	drift := make([]time.Duration, 0, opts.Polls)
	for i := 0; i < opts.Polls; i++ {
		t := time.Now()
		commit, err := b.repo.Resolve(ctx, b.ref, nil)
		if err != nil {
			return res, err
		}
		if commit != b.commit || !b.repo.Has(commit) {
			return res, fmt.Errorf("no-op poll found %s, not the applied %s", commit, b.commit)
		}
		polls = append(polls, time.Since(t))
		t = time.Now()
		r, err := b.app.Apply(ctx, applier.Request{Source: sourceLabel, Commit: commit, Objects: b.objs, Inventory: b.inv, Prune: true})
		if err != nil {
			return res, fmt.Errorf("drift check: %w", err)
		}
		if r.Created+r.Updated+r.Pruned != 0 {
			return res, fmt.Errorf("drift check wrote: %+v", r)
		}
		drift = append(drift, time.Since(t))
	}
	res.NoOpPoll, res.DriftCheck = median(polls), median(drift)

	if err := g.Write(map[string]string{"apps/group-07/cm-0007.yaml": manifest(7, "v2")}); err != nil {
		return res, err
	}
	if _, err := g.Commit("one change"); err != nil {
		return res, err
	}
	start = time.Now()
	if err := b.sync(ctx); err != nil {
		return res, fmt.Errorf("one change: %w", err)
	}
	res.OneChange = time.Since(start)
	if b.last.Updated != 1 {
		return res, fmt.Errorf("one change updated %d objects", b.last.Updated)
	}

	if !opts.SkipRSS {
		if res.GoGitFetch, res.GoGitFetchRSS, err = goGitFetch(ctx, opts.WorkDir, g.URL, g.Branch); err != nil {
			return res, err
		}
		if res.GitFetch, res.GitFetchRSS, err = gitFetch(ctx, opts.WorkDir, g.URL, g.Branch); err != nil {
			return res, err
		}
	}
	return res, nil
}

const sourceLabel = "default.gitops-bench"

func manifest(i int, v string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bench-%04d\n  namespace: default\n  labels: {app: bench}\ndata:\n  version: %s\n  index: \"%d\"\n", i, v, i)
}

// bench runs the loop's steps (as controller.sync does) on one source.
type bench struct {
	app    *applier.Applier
	repo   *source.Repo
	ref    source.Ref
	commit string
	objs   []loader.Object
	inv    []v1alpha1.InventoryEntry
	last   applier.Result
}

func (b *bench) sync(ctx context.Context) error {
	commit, err := b.repo.Resolve(ctx, b.ref, nil)
	if err != nil {
		return err
	}
	if _, err := b.repo.Fetch(ctx, b.ref, commit, nil); err != nil {
		return err
	}
	files, _, err := b.repo.Files(commit)
	if err != nil {
		return err
	}
	objs, err := loader.Load(files, nil)
	if err != nil {
		return err
	}
	r, err := b.app.Apply(ctx, applier.Request{Source: sourceLabel, Commit: commit, Objects: objs, Inventory: b.inv, Prune: true})
	if err != nil {
		return err
	}
	b.commit, b.objs, b.inv, b.last = commit, objs, r.Inventory, r
	return nil
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func goGitFetch(ctx context.Context, work, url, branch string) (time.Duration, int64, error) {
	dir := filepath.Join(work, "gogit-fetch")
	cmd := exec.CommandContext(ctx, "go", "run", "flotilla.dev/flotilla/bench/gitops/fetchrss", dir, url, branch)
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Errorf("go run fetchrss: %w", err)
	}
	var m struct {
		Nanos    int64 `json:"nanos"`
		MaxRSSKB int64 `json:"maxrssKB"`
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return 0, 0, fmt.Errorf("fetchrss output %q: %w", out, err)
	}
	return time.Duration(m.Nanos), m.MaxRSSKB << 10, nil
}

func gitFetch(ctx context.Context, work, url, branch string) (time.Duration, int64, error) {
	dir := filepath.Join(work, "git-fetch")
	if out, err := exec.CommandContext(ctx, "git", "init", "-q", "--bare", dir).CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("git init: %w: %s", err, out)
	}
	cmd := exec.CommandContext(ctx, "git", "-C", dir, "fetch", "-q", "--depth", "1", "--no-tags", url, "+refs/heads/"+branch+":refs/heads/"+branch)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("git fetch: %w: %s", err, out)
	}
	d := time.Since(start)
	var rss int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = ru.Maxrss << 10
	}
	return d, rss, nil
}
