package packaging

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestLintian: the amd64 .debs have no lintian error, and every override
// in packaging/*/lintian-overrides still matches a tag (a stale override
// would hide the next real problem).
func TestLintian(t *testing.T) {
	requireTools(t, "lintian", "dpkg-deb")
	p := v1(t)
	for _, name := range []string{"flotilla-agent", "flotilla-hub"} {
		// --info shows what each tag means in the failure message.
		out, _ := try(nil, "lintian", "--info", "--display-info", "--fail-on", "none", p[name+".deb"])
		var errs, warnings []string
		for _, line := range strings.Split(out, "\n") {
			switch {
			case strings.HasPrefix(line, "E: "), strings.Contains(line, "unused-override"), strings.Contains(line, "mismatched-override"):
				errs = append(errs, line)
			case strings.HasPrefix(line, "W: "):
				warnings = append(warnings, line)
			}
		}
		if len(warnings) > 0 {
			t.Logf("%s: lintian warnings (not errors):\n%s", name, strings.Join(warnings, "\n"))
		}
		if len(errs) > 0 {
			t.Errorf("%s: lintian:\n%s\n\nfull output:\n%s", name, strings.Join(errs, "\n"), out)
		}
	}
}

// entry is one path in a package, with its type and permissions.
type entry struct{ path, perms string }

// debEntries lists a .deb's paths (dpkg-deb -c).
func debEntries(t *testing.T, deb string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(run(t, nil, "dpkg-deb", "-c", deb)), "\n") {
		f := strings.Fields(line)
		// drwxr-xr-x root/root 0 2026-12-01 14:16 ./etc/flotilla/
		path := strings.TrimSuffix(strings.TrimPrefix(f[len(f)-1], "."), "/")
		if path != "" {
			out[path] = f[0]
		}
	}
	return out
}

// rpmEntries lists an .rpm's paths (rpm -qp).
func rpmEntries(t *testing.T, rpm string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(run(t, nil, "rpm", "-qp", "--qf", `[%{FILEMODES:perms} %{FILENAMES}\n]`, rpm)), "\n") {
		perms, path, _ := strings.Cut(line, " ")
		out[path] = perms
	}
	return out
}

// TestRPMHasTheDebsFiles: `rpm -qpl` lists the files `dpkg-deb -c` does,
// with the same permissions, the same config files and dependencies. The
// deb alone has its changelog file (rpm keeps the changelog in its
// header) and its lintian overrides; it also lists system directories
// (/usr, /usr/bin) that the rpm leaves to the distribution.
func TestRPMHasTheDebsFiles(t *testing.T) {
	requireTools(t, "rpm", "dpkg-deb")
	p := v1(t)
	for _, name := range []string{"flotilla-agent", "flotilla-hub"} {
		deb, rpm := debEntries(t, p[name+".deb"]), rpmEntries(t, p[name+".rpm"])
		debOnly := map[string]bool{
			"/usr/share/doc/" + name + "/changelog.Debian.gz": true,
			"/usr/share/lintian/overrides/" + name:            true,
		}
		for path, perms := range deb {
			if strings.HasPrefix(perms, "d") || debOnly[path] {
				continue
			}
			if rpm[path] != perms {
				t.Errorf("%s: %s is %s in the deb, %q in the rpm", name, path, perms, rpm[path])
			}
		}
		for path, perms := range rpm {
			if deb[path] != perms {
				t.Errorf("%s: %s is %s in the rpm, %q in the deb", name, path, perms, deb[path])
			}
		}
		debConf := strings.Fields(run(t, nil, "sh", "-c", `dpkg-deb --ctrl-tarfile "$1" | tar -xO ./conffiles`, "sh", p[name+".deb"]))
		rpmConf := strings.Fields(run(t, nil, "rpm", "-qp", "--configfiles", p[name+".rpm"]))
		if !slices.Equal(debConf, rpmConf) {
			t.Errorf("%s: conffiles %v in the deb, %v in the rpm", name, debConf, rpmConf)
		}
		var debDeps, rpmDeps []string
		for _, d := range strings.Split(run(t, nil, "dpkg-deb", "-f", p[name+".deb"], "Depends"), ",") {
			if d = strings.TrimSpace(d); d != "" {
				debDeps = append(debDeps, d)
			}
		}
		for _, d := range strings.Split(strings.TrimSpace(run(t, nil, "rpm", "-qp", "--requires", p[name+".rpm"])), "\n") {
			if d != "" && !strings.HasPrefix(d, "rpmlib(") && !strings.HasPrefix(d, "/") {
				rpmDeps = append(rpmDeps, d)
			}
		}
		sort.Strings(debDeps)
		sort.Strings(rpmDeps)
		if !slices.Equal(debDeps, rpmDeps) {
			t.Errorf("%s: depends %v in the deb, requires %v in the rpm", name, debDeps, rpmDeps)
		}
	}
}

// scanned are the places a package or its scripts could leave something;
// ignored are those other tests running at the same time write to (the
// agents of the e2e tests log to /var/log/flotilla/pods too).
var (
	scanned = []string{
		"/etc", "/usr/bin", "/usr/sbin", "/lib/systemd/system", "/usr/lib/systemd/system",
		"/usr/share/doc", "/usr/share/lintian/overrides", "/var/lib/flotilla", "/var/log/flotilla",
		"/var/lib/systemd", "/var/lib/dpkg/info",
	}
	ignored = regexp.MustCompile(`^(/etc/cni|/etc/netns|/var/log/flotilla/(containerd\.log|pods)|/var/lib/systemd/(timers|timesync|catalog|coredump))(/|$)`)
)

// files lists everything under the scanned places (dpkg's own records
// only for the flotilla packages).
func files(t *testing.T) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, top := range scanned {
		filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err != nil || ignored.MatchString(path) {
				if d != nil && d.IsDir() && path != top {
					return fs.SkipDir
				}
				return nil
			}
			if strings.HasPrefix(path, "/var/lib/dpkg/info/") && !strings.Contains(path, "flotilla") {
				return nil
			}
			seen[path] = true
			return nil
		})
	}
	return seen
}

// notInstalled stops a test that would replace or purge a real
// installation of Flotilla on this machine.
func notInstalled(t *testing.T) {
	t.Helper()
	for _, name := range []string{"flotilla-agent", "flotilla-hub"} {
		if out, err := try(nil, "dpkg-query", "-W", "-f", "${Status}", name); err == nil && strings.Contains(out, "installed") {
			t.Skipf("%s is installed on this machine (%s); the test would replace it", name, out)
		}
	}
	if _, err := os.Stat("/etc/flotilla"); err == nil {
		t.Skip("/etc/flotilla exists on this machine; the test would remove it")
	}
}

// purge removes the packages, ignoring those not installed.
func purge(t *testing.T) {
	t.Helper()
	if out, err := try(nil, "dpkg", "--purge", "flotilla-agent", "flotilla-hub"); err != nil {
		t.Errorf("dpkg --purge: %v\n%s", err, out)
	}
}

// TestInstallAndPurge: dpkg installs both packages where systemd is not
// running (as in a container or a chroot); the binaries run, the packaged
// configs pass `config check`, the units and conffiles are in place and
// enabled for boot; dpkg --purge then leaves nothing behind.
func TestInstallAndPurge(t *testing.T) {
	requireRoot(t)
	requireTools(t, "dpkg", "dpkg-deb", "dpkg-query", "containerd", "runc", "iptables")
	p := v1(t)
	notInstalled(t)
	before := files(t)
	t.Cleanup(func() { purge(t) })
	out := run(t, nil, "dpkg", "--install", p["flotilla-agent.deb"], p["flotilla-hub.deb"])
	t.Logf("dpkg --install:\n%s", out)

	for _, c := range [][]string{
		{"flotilla-agent", "version"}, {"flotilla-logger", "version"}, {"flotilla-hub", "version"}, {"flotctl", "version", "--client"},
	} {
		out := run(t, nil, "/usr/bin/"+c[0], c[1:]...)
		if !strings.Contains(out, c[0]+" ") || !strings.Contains(out, "linux/amd64") {
			t.Errorf("%s: %q", strings.Join(c, " "), out)
		}
	}
	for _, c := range []struct{ bin, file string }{{"flotilla-agent", "/etc/flotilla/agent.yaml"}, {"flotilla-hub", "/etc/flotilla/hub.yaml"}} {
		if out := run(t, nil, "/usr/bin/"+c.bin, "config", "check", "--config", c.file); strings.TrimSpace(out) != c.file+": ok" {
			t.Errorf("%s config check: %q", c.bin, out)
		}
	}
	for path, mode := range map[string]fs.FileMode{
		"/lib/systemd/system/flotilla-agent.service": 0o644,
		"/lib/systemd/system/flotilla-hub.service":   0o644,
		"/etc/flotilla/agent.yaml":                   0o600,
		"/etc/flotilla/hub.yaml":                     0o644,
		"/etc/flotilla/manifests":                    fs.ModeDir | 0o755,
		"/etc/flotilla/trust":                        fs.ModeDir | 0o755,
		// deb-systemd-helper enabled the units for the next boot.
		"/etc/systemd/system/multi-user.target.wants/flotilla-agent.service": fs.ModeSymlink | 0o777,
		"/etc/systemd/system/multi-user.target.wants/flotilla-hub.service":   fs.ModeSymlink | 0o777,
	} {
		st, err := os.Lstat(path)
		if err != nil {
			t.Error(err)
			continue
		}
		if st.Mode() != mode {
			t.Errorf("%s: mode %s, want %s", path, st.Mode(), mode)
		}
	}
	for name, want := range map[string]string{"flotilla-agent": "/etc/flotilla/agent.yaml", "flotilla-hub": "/etc/flotilla/hub.yaml"} {
		if out := run(t, nil, "dpkg-query", "-W", "-f", "${Conffiles}", name); !strings.Contains(out, want) {
			t.Errorf("%s conffiles: %q, want %s", name, out, want)
		}
	}
	if _, err := try(nil, "systemd-analyze", "--version"); err == nil {
		for _, u := range []string{"flotilla-agent.service", "flotilla-hub.service"} {
			if out, err := try(nil, "systemd-analyze", "verify", "/lib/systemd/system/"+u); err != nil || strings.Contains(out, u) {
				t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
			}
		}
	}

	run(t, nil, "dpkg", "--purge", "flotilla-agent", "flotilla-hub")
	after := files(t)
	var left, lost []string
	for f := range after {
		if !before[f] {
			left = append(left, f)
		}
	}
	for f := range before {
		if !after[f] {
			lost = append(lost, f)
		}
	}
	sort.Strings(left)
	sort.Strings(lost)
	if len(left) > 0 {
		t.Errorf("dpkg --purge left behind:\n  %s", strings.Join(left, "\n  "))
	}
	if len(lost) > 0 {
		t.Errorf("installing and purging removed what was there before:\n  %s", strings.Join(lost, "\n  "))
	}
}

// TestScriptsUnderSystemd runs the installed maintainer scripts (and the
// rpm's) as if systemd were running: in a mount namespace whose /run has
// /run/systemd/system, with systemctl, deb-systemd-invoke and
// deb-systemd-helper replaced by stand-ins that record their arguments.
// It checks the decisions the scripts make: start on a first install only
// with work to do, try-restart on an upgrade, stop on removal.
func TestScriptsUnderSystemd(t *testing.T) {
	requireRoot(t)
	requireTools(t, "dpkg", "unshare", "mount", "containerd", "runc", "iptables")
	p := v1(t)
	notInstalled(t)
	t.Cleanup(func() { purge(t) })
	run(t, nil, "dpkg", "--install", p["flotilla-agent.deb"], p["flotilla-hub.deb"])

	fake := t.TempDir()
	log := filepath.Join(fake, "calls")
	for _, name := range []string{"systemctl", "deb-systemd-invoke", "deb-systemd-helper"} {
		script := "#!/bin/sh\necho \"$(basename \"$0\") $*\" >> " + log + "\n"
		if err := os.WriteFile(filepath.Join(fake, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// calls runs a script with systemd "running" and returns the commands
	// it called on systemd.
	calls := func(script string, args ...string) string {
		t.Helper()
		os.Remove(log)
		sh := `mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/system && exec "$@"`
		out, err := try([]string{"PATH=" + fake + ":/usr/sbin:/usr/bin:/sbin:/bin"},
			"unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", sh, "sh", script}, args...)...)
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", script, args, err, out)
		}
		b, _ := os.ReadFile(log)
		return string(b)
	}
	has := func(got, want string) {
		t.Helper()
		if !strings.Contains(got, want+"\n") {
			t.Errorf("want a call %q, got:\n%s", want, got)
		}
	}
	hasNot := func(got, word string) {
		t.Helper()
		if strings.Contains(got, word) {
			t.Errorf("want no %q, got:\n%s", word, got)
		}
	}
	conf := "/etc/flotilla/agent.yaml"
	packaged, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(conf, packaged, 0o600)
	agent := "/var/lib/dpkg/info/flotilla-agent."

	// deb: a first install with the packaged config enables, does not start.
	got := calls(agent+"postinst", "configure", "")
	has(got, "deb-systemd-helper enable flotilla-agent.service")
	has(got, "systemctl --system daemon-reload")
	hasNot(got, "start")
	// ... and starts when the config names a hub,
	os.WriteFile(conf, append(packaged, "hub: https://hub.example:6443\n"...), 0o600)
	has(calls(agent+"postinst", "configure", ""), "deb-systemd-invoke start flotilla-agent.service")
	// ... or a static pod waits in the manifests dir (one of the test's
	// own: the demo's and e2e tests' agents read /etc/flotilla/manifests).
	manifests := t.TempDir()
	os.WriteFile(conf, append(packaged, "manifests-dir: "+manifests+"\n"...), 0o600)
	hasNot(calls(agent+"postinst", "configure", ""), "start")
	os.WriteFile(filepath.Join(manifests, "kiosk.yaml"), []byte("apiVersion: v1\nkind: Pod\n"), 0o644)
	has(calls(agent+"postinst", "configure", ""), "deb-systemd-invoke start flotilla-agent.service")
	os.WriteFile(conf, packaged, 0o600)
	// An upgrade restarts a running agent only.
	got = calls(agent+"postinst", "configure", "0.0.1-1")
	has(got, "deb-systemd-invoke try-restart flotilla-agent.service")
	hasNot(got, " start")
	// Removal stops it; an upgrade's prerm does nothing.
	has(calls(agent+"prerm", "remove"), "deb-systemd-invoke stop flotilla-agent.service")
	if got := calls(agent+"prerm", "upgrade", "0.0.2-1"); got != "" {
		t.Errorf("prerm upgrade called %q", got)
	}

	// The same decisions in the rpm's scripts.
	rpm := filepath.Join(root, "packaging/agent/rpm/")
	got = calls(rpm+"/post", "1")
	has(got, "systemctl --no-reload enable flotilla-agent.service")
	hasNot(got, "start")
	has(calls(rpm+"/post", "2"), "systemctl try-restart flotilla-agent.service")
	got = calls(rpm+"/preun", "0")
	has(got, "systemctl --no-reload disable flotilla-agent.service")
	has(got, "systemctl stop flotilla-agent.service")
	if got := calls(rpm+"/preun", "1"); got != "" {
		t.Errorf("%%preun 1 (upgrade) called %q", got)
	}

	// The hub starts at its first install, restarts on an upgrade.
	hub := "/var/lib/dpkg/info/flotilla-hub."
	has(calls(hub+"postinst", "configure", ""), "deb-systemd-invoke start flotilla-hub.service")
	has(calls(hub+"postinst", "configure", "0.0.1-1"), "deb-systemd-invoke try-restart flotilla-hub.service")
	has(calls(hub+"prerm", "remove"), "deb-systemd-invoke stop flotilla-hub.service")
	has(calls(filepath.Join(root, "packaging/hub/rpm/post"), "1"), "systemctl start flotilla-hub.service")

	// purge: the agent's identity and state go; pods' volumes stay while
	// there are pods, and go with the data dir once cleanup removed them.
	data := "/var/lib/flotilla/agent"
	if _, err := os.Stat(data); err == nil {
		t.Logf("%s exists on this machine: the purge of the agent's state is not tried", data)
		return
	}
	defer func() {
		os.RemoveAll(data)
		os.Remove("/var/lib/flotilla") // only when empty: a hub may keep its data beside
	}()
	for _, f := range []string{"pki/node.pem", "pki/ca.crt", "state.db", "localstore.key", "pod-cidr", "pods/uid-1/volumes/data/x"} {
		os.MkdirAll(filepath.Dir(filepath.Join(data, f)), 0o700)
		os.WriteFile(filepath.Join(data, f), []byte("x"), 0o600)
	}
	got = calls(agent+"postrm", "purge")
	has(got, "deb-systemd-helper purge flotilla-agent.service")
	left, _ := filepath.Glob(data + "/*")
	if !slices.Equal(left, []string{data + "/pods"}) {
		t.Errorf("purge with a pod left kept %v, want only %s/pods", left, data)
	}
	if _, err := os.Stat("/etc/flotilla/manifests"); err == nil {
		t.Error("purge left /etc/flotilla/manifests")
	}
	os.RemoveAll(data + "/pods")
	calls(agent+"postrm", "purge")
	if _, err := os.Stat(data); err == nil {
		t.Errorf("purge with no pod left kept %s", data)
	}
}
