package source

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/object"

	"flotilla.dev/flotilla/gitops/gittest"
	"flotilla.dev/flotilla/internal/testenv"
)

func newRepo(t *testing.T) *gittest.Repo {
	t.Helper()
	if err := gittest.Available(); err != nil {
		testenv.Unavailable(t, "%v (scripts/install-deps.sh installs it)", err)
	}
	r, err := gittest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestResolveFetchFiles(t *testing.T) {
	ctx := context.Background()
	g := newRepo(t)
	if err := g.Write(map[string]string{"apps/a.yaml": "a: 1\n", "apps/sub/b.yaml": "b: 2\n", "top.txt": "x"}); err != nil {
		t.Fatal(err)
	}
	c1 := must[string](t)(g.Commit("one"))

	r := must[*Repo](t)(Open(filepath.Join(t.TempDir(), "src"), g.URL))
	ref := Ref{Branch: "main"}
	got := must[string](t)(r.Resolve(ctx, ref, nil))
	if got != c1 {
		t.Fatalf("Resolve = %s, want %s", got, c1)
	}
	if fetched := must[bool](t)(r.Fetch(ctx, ref, got, nil)); !fetched {
		t.Fatal("the first Fetch did not fetch")
	}
	files, commit := mustFiles(t, r, c1)
	if commit.Message != "one\n" {
		t.Errorf("message %q", commit.Message)
	}
	b, err := fs.ReadFile(files, "apps/sub/b.yaml")
	if err != nil || string(b) != "b: 2\n" {
		t.Fatalf("apps/sub/b.yaml = %q, %v", b, err)
	}
	var walked []string
	if err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			walked = append(walked, p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(walked, ",") != "apps/a.yaml,apps/sub/b.yaml,top.txt" {
		t.Errorf("walked %v", walked)
	}

	// Unchanged: no fetch.
	if fetched := must[bool](t)(r.Fetch(ctx, ref, got, nil)); fetched {
		t.Error("Fetch fetched a commit it has")
	}

	// A new commit is fetched shallowly on top of the old one; reopening
	// the clone (a hub restart) keeps what was fetched.
	if err := g.Remove("apps/a.yaml"); err != nil {
		t.Fatal(err)
	}
	c2 := must[string](t)(g.Commit("two"))
	r2 := must[*Repo](t)(Open(r.dir, g.URL))
	if !r2.Has(c1) {
		t.Error("a reopened clone lost its commit")
	}
	got = must[string](t)(r2.Resolve(ctx, ref, nil))
	if got != c2 {
		t.Fatalf("Resolve = %s, want %s", got, c2)
	}
	must[bool](t)(r2.Fetch(ctx, ref, got, nil))
	files, _ = mustFiles(t, r2, c2)
	if _, err := fs.Stat(files, "apps/a.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("removed file still there: %v", err)
	}
}

func mustFiles(t *testing.T, r *Repo, c string) (fs.FS, *object.Commit) {
	t.Helper()
	f, commit, err := r.Files(c)
	if err != nil {
		t.Fatal(err)
	}
	return f, commit
}

func TestResolveTagsAndMissingRefs(t *testing.T) {
	ctx := context.Background()
	g := newRepo(t)
	c1 := must[string](t)(g.Commit("one"))
	must[string](t)(g.Git("-c", "user.name=t", "-c", "user.email=t@e", "tag", "-a", "-m", "release", "v1"))
	must[string](t)(g.Git("push", "-q", "origin", "v1"))
	must[string](t)(g.Commit("two"))

	r := must[*Repo](t)(Open(t.TempDir(), g.URL))
	got := must[string](t)(r.Resolve(ctx, Ref{Tag: "v1"}, nil))
	if got != c1 {
		t.Fatalf("annotated tag resolves to %s, want the commit %s", got, c1)
	}
	must[bool](t)(r.Fetch(ctx, Ref{Tag: "v1"}, got, nil))
	if !r.Has(c1) {
		t.Fatal("tag commit not fetched")
	}
	if _, err := r.Resolve(ctx, Ref{Branch: "nope"}, nil); !errors.Is(err, ErrRefNotFound) {
		t.Errorf("missing branch: %v", err)
	}
	// A pinned commit resolves without asking the remote.
	if got := must[string](t)(r.Resolve(ctx, Ref{Commit: strings.ToUpper(c1)}, nil)); got != c1 {
		t.Errorf("pinned = %s", got)
	}
}

func TestCredentialsNeverShown(t *testing.T) {
	c := Credentials{KeyPassword: []byte("hunter2-secret")}
	for _, s := range []string{c.String(), c.GoString()} {
		if strings.Contains(s, "hunter2") {
			t.Fatalf("credentials shown: %s", s)
		}
	}
	if _, err := transportAuth("ssh://git@example.com/x.git", Credentials{KeyIdentity: []byte("not a key hunter2")}, t.TempDir()); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad identity: %v", err)
	}
	if _, err := transportAuth("ssh://git@example.com/x.git", Credentials{KeyIdentity: []byte("k")}, t.TempDir()); !errors.Is(err, ErrCredentials) {
		t.Fatalf("ssh without known_hosts: %v", err)
	}
	a, err := transportAuth("https://example.com/x.git", Credentials{KeyUsername: []byte("u"), KeyPassword: []byte("hunter2")}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(a.String(), "hunter2") {
		t.Fatalf("auth shown: %s", a)
	}
}

// signingEnv makes a throwaway GPG key in a private GNUPGHOME.
func gpgKey(t *testing.T) (env []string, fpr string, armored []byte) {
	t.Helper()
	testenv.RequireTool(t, "gpg", "apt-get install -y gnupg")
	home, err := os.MkdirTemp("", "gpg")
	if err != nil {
		t.Fatal(err)
	}
	env = []string{"GNUPGHOME=" + home}
	t.Cleanup(func() {
		kill := exec.Command("gpgconf", "--kill", "gpg-agent")
		kill.Env = append(os.Environ(), env...)
		_ = kill.Run()
		os.RemoveAll(home)
	})
	run := func(args ...string) []byte {
		cmd := exec.Command("gpg", append([]string{"--batch", "--pinentry-mode", "loopback", "--passphrase", ""}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gpg %v: %v", args, err)
		}
		return out
	}
	run("--quick-gen-key", "Flotilla Test <t@e>", "ed25519", "sign", "never")
	for _, line := range strings.Split(string(run("--with-colons", "--list-keys", "t@e")), "\n") {
		if strings.HasPrefix(line, "fpr:") {
			fpr = strings.Split(line, ":")[9]
			break
		}
	}
	return env, fpr, run("--armor", "--export", "t@e")
}

func TestVerifyGPG(t *testing.T) {
	g := newRepo(t)
	env, fpr, pub := gpgKey(t)
	g.Env = env
	signed := must[string](t)(g.Commit("signed", "--gpg-sign="+fpr))
	unsigned := must[string](t)(g.Commit("unsigned"))
	_, _, other := gpgKey(t)

	r := must[*Repo](t)(Open(t.TempDir(), g.URL))
	keys := must[*TrustedKeys](t)(ParseTrustedKeys(map[string][]byte{"key.asc": pub}))
	otherKeys := must[*TrustedKeys](t)(ParseTrustedKeys(map[string][]byte{"key.asc": other}))
	for _, c := range []string{signed, unsigned} {
		if _, err := r.Fetch(context.Background(), Ref{Commit: c}, c, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, sc, _ := r.Files(signed)
	who, err := keys.Verify(sc)
	if err != nil || !strings.Contains(who, "Flotilla Test") {
		t.Fatalf("signed commit: %q, %v", who, err)
	}
	if _, err := otherKeys.Verify(sc); !errors.Is(err, ErrUntrusted) {
		t.Errorf("signed by an untrusted key: %v", err)
	}
	_, uc, _ := r.Files(unsigned)
	if _, err := keys.Verify(uc); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned commit: %v", err)
	}
}

func TestVerifySSH(t *testing.T) {
	testenv.RequireTool(t, "ssh-keygen", "apt-get install -y openssh-client")
	g := newRepo(t)
	dir := t.TempDir()
	for _, n := range []string{"signer", "stranger"} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", n, "-f", filepath.Join(dir, n)).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
	}
	must[string](t)(g.Git("config", "gpg.format", "ssh"))
	must[string](t)(g.Git("config", "user.signingkey", filepath.Join(dir, "signer")))
	signed := must[string](t)(g.Commit("signed", "-S"))
	pub := must[[]byte](t)(os.ReadFile(filepath.Join(dir, "signer.pub")))
	stranger := must[[]byte](t)(os.ReadFile(filepath.Join(dir, "stranger.pub")))

	r := must[*Repo](t)(Open(t.TempDir(), g.URL))
	must[bool](t)(r.Fetch(context.Background(), Ref{Branch: "main"}, signed, nil))
	_, c, _ := r.Files(signed)
	keys := must[*TrustedKeys](t)(ParseTrustedKeys(map[string][]byte{"allowed": append(append([]byte{}, stranger...), pub...)}))
	if who, err := keys.Verify(c); err != nil || !strings.HasPrefix(who, "SSH key SHA256:") {
		t.Fatalf("signed commit: %q, %v", who, err)
	}
	only := must[*TrustedKeys](t)(ParseTrustedKeys(map[string][]byte{"allowed": stranger}))
	if _, err := only.Verify(c); !errors.Is(err, ErrUntrusted) {
		t.Errorf("untrusted signer: %v", err)
	}
	// A tampered commit (the message changed, signature kept) fails.
	c.Message = "tampered\n"
	if _, err := keys.Verify(c); !errors.Is(err, ErrUntrusted) {
		t.Errorf("tampered commit: %v", err)
	}
	if _, err := ParseTrustedKeys(map[string][]byte{"x": []byte("garbage")}); err == nil {
		t.Error("garbage keys accepted")
	}
}
