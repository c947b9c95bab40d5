package mountinfo

import (
	"slices"
	"testing"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/a\040b/c`: "/tmp/a b/c",
		`/plain`:        "/plain",
		`/tab\011x`:     "/tab\tx",
		`/short\04`:     `/short\04`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUnderFindsRoot checks the reading of this machine's own mountinfo:
// / is always mounted, and nothing is under a path that does not exist.
func TestUnderFindsRoot(t *testing.T) {
	all, err := Under("/")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(all, "/") {
		t.Fatalf("the mounts under / do not include / itself: %v", all)
	}
	none, err := Under("/no/such/dir/here")
	if err != nil || len(none) != 0 {
		t.Fatalf("mounts under a missing dir: %v, %v", none, err)
	}
}
