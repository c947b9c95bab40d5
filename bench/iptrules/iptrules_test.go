package iptrules

import (
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	for line, want := range map[string][]string{
		`-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -j DROP`: {"-A", "KUBE-FIREWALL", "!", "-s", "127.0.0.0/8", "-d", "127.0.0.0/8", "-m", "comment", "--comment", "block incoming localnet connections", "-j", "DROP"},
		`-A FLOTILLA-SERVICES -d 10.43.0.1/32 -m comment --comment "bench/svc:http cluster IP" -j X`:                          {"-A", "FLOTILLA-SERVICES", "-d", "10.43.0.1/32", "-m", "comment", "--comment", "bench/svc:http cluster IP", "-j", "X"},
		`-A X -m comment --comment "a \"quoted\" word"  -j Y`:                                                                 {"-A", "X", "-m", "comment", "--comment", `a "quoted" word`, "-j", "Y"},
		`-A X --comment ""`: {"-A", "X", "--comment", ""},
	} {
		if got := Split(line); !slices.Equal(got, want) {
			t.Errorf("Split(%q) = %q\nwant %q", line, got, want)
		}
	}
}
