package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Setting
		err  string
	}{
		{in: "", want: Setting{Auto: true}},
		{in: "auto", want: Setting{Auto: true}},
		{in: "0", want: Setting{}},
		{in: "0Gi", want: Setting{}},
		{in: "1Gi", want: Setting{Bytes: 1 << 30}},
		{in: "1536Mi", want: Setting{Bytes: 1536 << 20}},
		{in: "1.5Gi", want: Setting{Bytes: 3 << 29}},
		{in: "2G", want: Setting{Bytes: 2e9}},
		{in: "64Mi", want: Setting{Bytes: 64 << 20}},
		{in: "off", want: Setting{}},
		{in: "1536MiB", want: Setting{Bytes: 1536 << 20}},
		{in: "2GiB", want: Setting{Bytes: 2 << 30}},
		{in: "1073741824B", want: Setting{Bytes: 1 << 30}},
		{in: "1.5GiB", err: "want a quantity such as 1Gi"},
		{in: "63Mi", err: "below the 64Mi"},
		{in: "1", err: "the suffix counts"},
		{in: "-1Gi", err: "negative"},
		{in: "1GB", err: "want a quantity such as 1Gi"},
		{in: "lots", err: "want a quantity such as 1Gi"},
		{in: "Auto", err: "want a quantity"},
	} {
		got, err := Parse(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("Parse(%q) = %+v, %v; want an error saying %q", c.in, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// fakeRoot writes files (path → content) under a temporary root.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		f := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	v2Mount     = "25 20 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"
	hybridMount = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
		"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n" +
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	service = "/system.slice/flotilla-hub.service"
)

func TestCgroupLimit(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		bytes int64
		file  string
		why   string
	}{{
		name: "v2 service with MemoryMax",
		files: map[string]string{
			"proc/self/cgroup":                        "0::" + service + "\n",
			"proc/self/mountinfo":                     v2Mount,
			"sys/fs/cgroup" + service + "/memory.max": "2147483648\n",
			"sys/fs/cgroup/system.slice/memory.max":   "max\n",
		},
		bytes: 2 << 30, file: "/sys/fs/cgroup" + service + "/memory.max", why: "cgroup v2 " + service,
	}, {
		name: "v2 parent slice smaller",
		files: map[string]string{
			"proc/self/cgroup":                        "0::" + service + "\n",
			"proc/self/mountinfo":                     v2Mount,
			"sys/fs/cgroup" + service + "/memory.max": "4294967296\n",
			"sys/fs/cgroup/system.slice/memory.max":   "1073741824\n",
		},
		bytes: 1 << 30, file: "/sys/fs/cgroup/system.slice/memory.max", why: "cgroup v2 " + service,
	}, {
		name: "v2 unlimited",
		files: map[string]string{
			"proc/self/cgroup":                        "0::" + service + "\n",
			"proc/self/mountinfo":                     v2Mount,
			"sys/fs/cgroup" + service + "/memory.max": "max\n",
			"sys/fs/cgroup/system.slice/memory.max":   "max\n",
		},
		why: "cgroup v2 " + service + " has no memory limit",
	}, {
		// A container with its own cgroup namespace sees itself as /.
		name: "v2 container",
		files: map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"proc/self/mountinfo":      "1000 990 0:80 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n",
			"sys/fs/cgroup/memory.max": "536870912\n",
		},
		bytes: 512 << 20, file: "/sys/fs/cgroup/memory.max", why: "cgroup v2 /",
	}, {
		// A container without a cgroup namespace: the mount's root is
		// its own cgroup.
		name: "v2 mount of a subtree",
		files: map[string]string{
			"proc/self/cgroup":         "0::/kubepods/pod1/ctr\n",
			"proc/self/mountinfo":      "1000 990 0:80 /kubepods/pod1/ctr /sys/fs/cgroup ro - cgroup2 cgroup rw\n",
			"sys/fs/cgroup/memory.max": "805306368\n",
		},
		bytes: 768 << 20, file: "/sys/fs/cgroup/memory.max", why: "cgroup v2 /kubepods/pod1/ctr",
	}, {
		name: "hybrid: memory on v1",
		files: map[string]string{
			"proc/self/cgroup":    "4:memory:/process_api/abc\n1:name=systemd:/\n0::/\n",
			"proc/self/mountinfo": hybridMount,
			"sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes": "3221225472\n",
			"sys/fs/cgroup/memory/process_api/memory.limit_in_bytes":     "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                 "9223372036854771712\n",
			"sys/fs/cgroup/unified/cgroup.procs":                         "",
		},
		bytes: 3 << 30, file: "/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes", why: "cgroup v1 /process_api/abc",
	}, {
		name: "hybrid unlimited",
		files: map[string]string{
			"proc/self/cgroup":    "4:memory:/process_api/abc\n0::/\n",
			"proc/self/mountinfo": hybridMount,
			"sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                 "9223372036854771712\n",
		},
		why: "cgroup v1 /process_api/abc has no memory limit",
	}, {
		name: "v2 without the memory controller, no v1",
		files: map[string]string{
			"proc/self/cgroup":                          "0::" + service + "\n",
			"proc/self/mountinfo":                       v2Mount,
			"sys/fs/cgroup" + service + "/cgroup.procs": "1\n",
		},
		why: "no memory controller",
	}, {
		name:  "not Linux",
		files: map[string]string{"etc/hostname": "hub\n"},
		why:   "no cgroup",
	}} {
		t.Run(c.name, func(t *testing.T) {
			got, err := CgroupLimit(fakeRoot(t, c.files))
			if err != nil {
				t.Fatal(err)
			}
			if got.Bytes != c.bytes || (c.bytes != 0 && got.File != c.file) || !strings.Contains(got.Why, c.why) {
				t.Errorf("CgroupLimit = %+v; want %d bytes from %s, why %q", got, c.bytes, c.file, c.why)
			}
		})
	}
}

func TestCgroupLimitGarbled(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/self/cgroup":                        "0::" + service + "\n",
		"proc/self/mountinfo":                     v2Mount,
		"sys/fs/cgroup" + service + "/memory.max": "2G\n",
	})
	_, err := CgroupLimit(root)
	if err == nil || !strings.Contains(err.Error(), service+"/memory.max") {
		t.Fatalf("a memory.max of 2G: %v; want an error naming the file", err)
	}
}

func TestChoose(t *testing.T) {
	limited := map[string]string{
		"proc/self/cgroup":                        "0::" + service + "\n",
		"proc/self/mountinfo":                     v2Mount,
		"sys/fs/cgroup" + service + "/memory.max": "2147483648\n",
	}
	unlimited := map[string]string{
		"proc/self/cgroup":                        "0::" + service + "\n",
		"proc/self/mountinfo":                     v2Mount,
		"sys/fs/cgroup" + service + "/memory.max": "max\n",
	}
	env := func(files map[string]string, vars map[string]string, current int64) Env {
		return Env{
			LookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
			Root:      fakeRoot(t, files),
			Current:   func() int64 { return current },
		}
	}
	for _, c := range []struct {
		name    string
		setting Setting
		env     Env
		limit   int64
		source  string
		fromEnv bool
	}{
		{"auto under a cgroup limit", Setting{Auto: true}, env(limited, nil, math.MaxInt64),
			1932735283, "0.9 of /sys/fs/cgroup" + service + "/memory.max 2048MiB", false},
		{"auto without a cgroup limit", Setting{Auto: true}, env(unlimited, nil, math.MaxInt64),
			0, "has no memory limit", false},
		{"explicit beats the cgroup", Setting{Bytes: 1 << 30}, env(limited, nil, math.MaxInt64),
			1 << 30, "--memory-limit", false},
		{"0 is none, whatever the cgroup", Setting{}, env(limited, nil, math.MaxInt64),
			0, "--memory-limit 0", false},
		{"GOMEMLIMIT beats both", Setting{Bytes: 1 << 30}, env(limited, map[string]string{"GOMEMLIMIT": "700MiB"}, 700<<20),
			700 << 20, "GOMEMLIMIT=700MiB", true},
		{"GOMEMLIMIT=off", Setting{Auto: true}, env(limited, map[string]string{"GOMEMLIMIT": "off"}, math.MaxInt64),
			0, "GOMEMLIMIT=off", true},
		{"empty GOMEMLIMIT is unset", Setting{Auto: true}, env(limited, map[string]string{"GOMEMLIMIT": ""}, math.MaxInt64),
			1932735283, "0.9 of", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := Choose(c.setting, c.env)
			if err != nil {
				t.Fatal(err)
			}
			if d.Limit != c.limit || !strings.Contains(d.Source, c.source) || d.FromEnv != c.fromEnv {
				t.Errorf("Choose = %+v; want limit %d from %q (from env %v)", d, c.limit, c.source, c.fromEnv)
			}
		})
	}
}

// This machine's own cgroup is read without error, whatever it is.
func TestCgroupLimitHere(t *testing.T) {
	cg, err := CgroupLimit("/")
	if err != nil {
		t.Fatal(err)
	}
	if cg.Why == "" {
		t.Errorf("CgroupLimit(/) = %+v says nothing about why", cg)
	}
	t.Logf("this machine: %+v", cg)
}
