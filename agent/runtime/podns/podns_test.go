package podns

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"flotilla.dev/flotilla/internal/testenv"
)

func needRoot(t *testing.T) {
	testenv.RequireRoot(t, "creates namespaces")
}

func inode(t *testing.T, path string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// hostnameIn reads the hostname inside a UTS namespace.
func hostnameIn(t *testing.T, path string) string {
	t.Helper()
	out := make(chan string, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		f, err := os.Open(path)
		if err != nil {
			out <- err.Error()
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWUTS); err != nil {
			out <- err.Error()
			return
		}
		var u unix.Utsname
		unix.Uname(&u)
		out <- strings.TrimRight(string(u.Nodename[:]), "\x00")
	}()
	return <-out
}

func TestCreatePodNamespaces(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	paths := map[Kind]string{Net: filepath.Join(dir, "p", "net"), IPC: filepath.Join(dir, "p", "ipc"), UTS: filepath.Join(dir, "p", "uts")}
	before := map[Kind]uint64{}
	for k := range paths {
		before[k] = inode(t, "/proc/self/ns/"+string(k))
	}
	if err := Create("web-0", Spec{Net, paths[Net]}, Spec{IPC, paths[IPC]}, Spec{UTS, paths[UTS]}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(paths[Net], paths[IPC], paths[UTS]) })
	for k, p := range paths {
		if !IsNamespace(p) {
			t.Errorf("%s is not a namespace", p)
		}
		if inode(t, p) == before[k] {
			t.Errorf("%s namespace is the host's", k)
		}
		if now := inode(t, "/proc/self/ns/"+string(k)); now != before[k] {
			t.Errorf("the test process left its %s namespace", k)
		}
	}
	if h := hostnameIn(t, paths[UTS]); h != "web-0" {
		t.Errorf("hostname in pod = %q", h)
	}
	host, _ := os.Hostname()
	if host == "web-0" {
		t.Error("host's hostname changed")
	}

	// Inside the network namespace there is only a loopback device.
	var ifaces []net.Interface
	if err := Do(paths[Net], func() error {
		var err error
		ifaces, err = net.Interfaces()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(ifaces) != 1 || ifaces[0].Name != "lo" {
		t.Errorf("interfaces in pod netns = %v", ifaces)
	}

	if err := Remove(paths[Net], paths[IPC], paths[UTS]); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); !os.IsNotExist(err) || IsNamespace(p) {
			t.Errorf("%s still there: %v", p, err)
		}
	}
	if err := Remove(paths[Net]); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
}

func TestCreateRefusesExistingPath(t *testing.T) {
	needRoot(t)
	p := filepath.Join(t.TempDir(), "net")
	os.WriteFile(p, nil, 0o600)
	if err := CreateNet(p); err == nil {
		Remove(p)
		t.Fatal("created a namespace over an existing file")
	}
	if err := Create("", Spec{Kind("pid"), filepath.Join(t.TempDir(), "pid")}); err == nil {
		t.Fatal("accepted an unknown kind")
	}
}
