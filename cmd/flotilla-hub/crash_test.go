package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"flotilla.dev/flotilla/internal/testbin"
	"flotilla.dev/flotilla/internal/testenv"
)

// startHub runs the flotilla-hub binary on a free loopback port and waits
// until it answers.
func startHub(t *testing.T, bin, dataDir string) (*exec.Cmd, kubernetes.Interface) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--config=")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The hub prints its URL once it listens.
	sc := bufio.NewScanner(stderr)
	ready := make(chan struct{})
	go func() {
		for sc.Scan() {
			if strings.Contains(sc.Text(), "admin kubeconfig:") {
				close(ready)
				break
			}
		}
		for sc.Scan() {
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the hub did not start within 30s")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 2000, 2000
	cs := kubernetes.NewForConfigOrDie(cfg)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err == nil {
			return cmd, cs
		} else if time.Now().After(deadline) {
			t.Fatalf("the hub does not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAcknowledgedWritesSurviveSIGKILL writes under load, kills the hub
// with SIGKILL mid-stream, restarts it on the same data dir and checks that
// every write the hub acknowledged is there.
func TestAcknowledgedWritesSurviveSIGKILL(t *testing.T) {
	testenv.Integration(t, "runs the hub binary")
	bin := testbin.Path(t, "flotilla-hub")
	dir := t.TempDir()
	cmd, cs := startHub(t, bin, dir)

	var acked sync.Map
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				name := fmt.Sprintf("w%d-%d", w, i)
				_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": fmt.Sprint(i)}}, metav1.CreateOptions{})
				if err != nil {
					return // the hub is gone
				}
				acked.Store(name, true)
				n.Add(1)
			}
		}(w)
	}
	// Kill it while the writers are busy.
	for n.Load() < 300 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	cancel()
	wg.Wait()

	_, cs2 := startHub(t, bin, dir)
	list, err := cs2.CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, cm := range list.Items {
		have[cm.Name] = true
	}
	missing := 0
	total := 0
	acked.Range(func(k, _ any) bool {
		total++
		if !have[k.(string)] {
			missing++
			if missing < 5 {
				t.Errorf("acknowledged write %s lost", k)
			}
		}
		return true
	})
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged writes lost after SIGKILL", missing, total)
	}
	t.Logf("%d acknowledged writes, all present after SIGKILL and restart (%d objects stored)", total, len(list.Items))
	if _, err := os.Stat(filepath.Join(dir, "state.db")); err != nil {
		t.Errorf("state.db not in the data dir: %v", err)
	}
}
