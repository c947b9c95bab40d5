package procstat

import (
	"os"
	"testing"
	"time"
)

func TestOwnProcess(t *testing.T) {
	st, err := Status(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st["VmRSS"] <= 0 || RSS(os.Getpid()) <= 0 {
		t.Fatalf("no resident memory read: %v", st)
	}
	before, err := CPUTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(150 * time.Millisecond); time.Now().Before(end); {
	}
	if after, _ := CPUTicks(os.Getpid()); after <= before {
		t.Errorf("CPU ticks did not move: %d then %d", before, after)
	}
	if _, err := CPUTicks(-1); err == nil {
		t.Error("no error for a process that does not exist")
	}
	if RSS(0) != 0 || CPUSeconds(0) != 0 {
		t.Error("pid 0 should read as no figure")
	}
}
