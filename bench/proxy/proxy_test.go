package proxybench

import (
	"context"
	"os"
	"testing"

	"flotilla.dev/flotilla/internal/testenv"
)

// TestRunSmall runs the driver at a tiny size, so that `make bench` does
// not find it broken; the figures themselves are not checked.
func TestRunSmall(t *testing.T) {
	testenv.RequireRoot(t, "creates network namespaces")
	res, err := Run(context.Background(), Options{Services: []int{5, 10}, Changes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Figures) != 2 || res.Figures[1].Rules == 0 || res.Figures[1].PerRuleCalls == 0 || res.OneChangeChains == 0 {
		t.Errorf("incomplete results: %+v", res)
	}
}

// TestFigures prints the full-size figures when FLOTILLA_BENCH_PROXY is
// set (`make bench` runs them through cmd/flotilla-bench instead).
func TestFigures(t *testing.T) {
	if os.Getenv("FLOTILLA_BENCH_PROXY") == "" {
		t.Skip("set FLOTILLA_BENCH_PROXY=1 to print the full-size figures")
	}
	res, err := Run(context.Background(), Options{Mode: os.Getenv("FLOTILLA_BENCH_PROXY_MODE")})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range res.Lines() {
		t.Log(l)
	}
}
