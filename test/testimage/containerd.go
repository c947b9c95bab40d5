package testimage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"flotilla.dev/flotilla/agent/runtime/purge"
	"flotilla.dev/flotilla/internal/testenv"
)

// ContainerdSocket is where tests find containerd.
const ContainerdSocket = testenv.ContainerdSocket

// Containerd connects to the machine's containerd and creates a containerd
// namespace unique to the test. At cleanup everything in it is removed
// (tasks killed, containers, images, leases, snapshots, content) and then
// the namespace itself. The test skips (fails under CI) when not root or
// when containerd does not answer, and skips with -short: see testenv.
func Containerd(t testing.TB) (*containerd.Client, string) {
	t.Helper()
	testenv.RequireContainerd(t)
	client, err := containerd.New(ContainerdSocket, containerd.WithTimeout(5*time.Second))
	if err != nil {
		testenv.Unavailable(t, "containerd at %s does not answer (%v); start it with scripts/install-deps.sh", ContainerdSocket, err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	ns := "flotilla-test-" + strings.Trim(name, "-") + "-" + hex.EncodeToString(b)
	ctx := namespaces.WithNamespace(context.Background(), ns)
	if err := client.NamespaceService().Create(ctx, ns, map[string]string{"flotilla.dev/test": "true"}); err != nil {
		client.Close()
		t.Fatalf("create containerd namespace %s: %v", ns, err)
	}
	t.Cleanup(func() {
		defer client.Close()
		if err := DeleteNamespace(context.Background(), client, ns); err != nil {
			t.Errorf("clean up containerd namespace %s: %v", ns, err)
		}
	})
	return client, ns
}

// DeleteNamespace removes everything in a containerd namespace and then the
// namespace (see agent/runtime/purge, which flotilla-agent cleanup uses too).
func DeleteNamespace(ctx context.Context, client *containerd.Client, ns string) error {
	return purge.DeleteNamespace(ctx, client, ns)
}
