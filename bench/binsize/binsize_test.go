package binsize

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"flotilla.dev/flotilla/internal/testenv"
)

func TestSymbolPackage(t *testing.T) {
	for sym, want := range map[string]string{
		"github.com/sigstore/sigstore/pkg/signature.(*ECDSAVerifier).VerifySignature": "github.com/sigstore/sigstore/pkg/signature",
		"type:*k8s.io/api/core/v1.Pod":    "k8s.io/api/core/v1",
		"go:itab.*bytes.Buffer,io.Reader": "bytes",
		"go:itab.*k8s.io/client-go/kubernetes/typed/core/v1.pods,k8s.io/client-go/kubernetes/typed/core/v1.PodInterface": "k8s.io/client-go/kubernetes/typed/core/v1",
		"runtime.mallocgc": "runtime",
		"go:func.*":        "",
		"flotilla.dev/flotilla/agent/kubelet.(*Kubelet).syncPod.func1": "flotilla.dev/flotilla/agent/kubelet",
		"slices.SortFunc[go.shape.[]string,go.shape.string]":           "slices",
		"vendor/golang.org/x/net/http2/hpack.init":                     "vendor/golang.org/x/net/http2/hpack",
	} {
		if got := SymbolPackage(sym); got != want {
			t.Errorf("SymbolPackage(%q) = %q, want %q", sym, got, want)
		}
	}
}

func TestGroup(t *testing.T) {
	got := Group(map[string]int64{
		"runtime": 10, "net/http": 5,
		"github.com/sigstore/sigstore/pkg/signature": 7, "github.com/sigstore/sigstore/pkg/cryptoutils": 1,
		"k8s.io/api/core/v1": 20, "k8s.io/api/apps/v1": 2,
		"flotilla.dev/flotilla/agent/kubelet": 3, "flotilla.dev/flotilla/agent/cni": 1, "flotilla.dev/flotilla/registry/trust": 4,
	}, "flotilla.dev/flotilla")
	want := "k8s.io/api=22 std=15 github.com/sigstore/sigstore=8 flotilla.dev/flotilla/agent=4 flotilla.dev/flotilla/registry=4"
	var parts []string
	for _, p := range got {
		parts = append(parts, fmt.Sprintf("%s=%d", p.Path, p.Bytes))
	}
	if s := strings.Join(parts, " "); s != want {
		t.Errorf("Group = %s\nwant    %s", s, want)
	}
}

// A real binary: a small program importing encoding/json only through
// one of its own packages.
func TestSizesAndOnlyThrough(t *testing.T) {
	testenv.Integration(t, "builds a binary")
	testenv.RequireTool(t, "go", "the go command")
	dir := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.test/m\n\ngo 1.22\n")
	write("enc/enc.go", "package enc\n\nimport \"encoding/json\"\n\n//go:noinline\nfunc Do(v any) ([]byte, error) { return json.Marshal(v) }\n")
	write("main.go", "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n\n\t\"example.test/m/enc\"\n)\n\nfunc main() {\n\tb, _ := enc.Do(os.Args)\n\tfmt.Println(string(b))\n}\n")
	bin := filepath.Join(dir, "m")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx := context.Background()
	sizes, err := Sizes(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	if sizes["encoding/json"] == 0 || sizes["runtime"] == 0 || sizes["example.test/m/enc"] == 0 {
		t.Fatalf("sizes miss packages: json %d runtime %d enc %d", sizes["encoding/json"], sizes["runtime"], sizes["example.test/m/enc"])
	}
	only, err := OnlyThrough(ctx, dir, "example.test/m", "example.test/m/enc")
	if err != nil {
		t.Fatal(err)
	}
	if !only["example.test/m/enc"] || !only["encoding/json"] || only["fmt"] || only["runtime"] {
		t.Fatalf("only through enc: %v", only)
	}
	total, pkgs := Sum(sizes, only)
	if total <= sizes["example.test/m/enc"] || len(pkgs) < 2 || pkgs[0].Bytes < pkgs[len(pkgs)-1].Bytes {
		t.Fatalf("sum %d over %v", total, pkgs)
	}
	if _, err := OnlyThrough(ctx, dir, "example.test/m", "net/http"); err == nil || !strings.Contains(err.Error(), "does not import") {
		t.Fatalf("a package the program does not import: %v", err)
	}
	stripped := filepath.Join(dir, "stripped")
	build = exec.Command("go", "build", "-ldflags=-s -w", "-o", stripped, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if _, err := Sizes(ctx, stripped); err == nil || !strings.Contains(err.Error(), "stripped") {
		t.Fatalf("a stripped binary: %v", err)
	}
}

func TestLinkCost(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.test/m\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, after, err := LinkCost(context.Background(), dir, t.TempDir(),
		"package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"hi\") }\n",
		"package main\n\nimport (\n\t\"encoding/json\"\n\t\"os\"\n)\n\nfunc main() { b, _ := json.Marshal(os.Args); os.Stdout.Write(b) }\n")
	if err != nil {
		t.Fatal(err)
	}
	if before <= 0 || after <= before {
		t.Fatalf("sizes %d -> %d: encoding/json costs nothing?", before, after)
	}
	if _, _, err := LinkCost(context.Background(), dir, t.TempDir(), "package main\n\nfunc main() { undefined() }\n", ""); err == nil || !strings.Contains(err.Error(), "build without") {
		t.Fatalf("a broken program: %v", err)
	}
}

func TestReflectMethodPath(t *testing.T) {
	dump := `# example.com/cmd
_ -> _rt0_amd64_linux
_rt0_amd64_linux -> runtime.main
runtime.main -> main.main
main.main -> example.com/render.Page
example.com/render.Page -> text/template.(*Template).Execute
text/template.(*Template).Execute -> text/template.(*state).walk
text/template.(*state).walk -> text/template.(*state).evalField <ReflectMethod>
main.main -> fmt.Println
`
	got, err := reflectMethodPath(strings.NewReader(dump))
	if err != nil {
		t.Fatal(err)
	}
	want := "_rt0_amd64_linux runtime.main main.main example.com/render.Page text/template.(*Template).Execute text/template.(*state).walk text/template.(*state).evalField"
	if strings.Join(got, " ") != want {
		t.Errorf("path %q\nwant %q", got, want)
	}
	if got, err := reflectMethodPath(strings.NewReader("_ -> main.main\nmain.main -> fmt.Println\n")); got != nil || err != nil {
		t.Errorf("without a reflect method call: %q %v", got, err)
	}
}
