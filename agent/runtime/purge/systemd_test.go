package purge

import "testing"

func TestSystemdUnitNamesAreNotTouched(t *testing.T) {
	for name, want := range map[string]bool{
		"system.slice": true, "init.scope": true, "containerd.service": true,
		"flotilla": false, "flotdemo-dev1": false, "k8s.io": false,
	} {
		if got := systemdUnit(name); got != want {
			t.Errorf("systemdUnit(%q) = %v, want %v", name, got, want)
		}
	}
}
