package configcheck

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type host struct {
	Mirrors   []string `mapstructure:"mirrors"`
	PlainHTTP bool     `mapstructure:"plainHTTP"`
	Port      int
}

func options() Options {
	f := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.String("node-name", "", "")
	f.Int("max-pods", 0, "")
	f.Bool("debug", false, "")
	f.Duration("interval", time.Second, "")
	f.StringSlice("dirs", nil, "")
	f.String("labels", "", "")
	f.String("hosts", "", "")
	return Options{
		Flags: f,
		Shapes: map[string]Shape{
			"labels": {Scalar: true, Map: true},
			"hosts":  {Struct: reflect.TypeFor[map[string]host]()},
		},
		Help: "cmd --help",
	}
}

func check(t *testing.T, content string) ([]Problem, Lines) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return Check(file, options())
}

func TestGoodFiles(t *testing.T) {
	for _, content := range []string{
		"",
		"# only comments\n",
		"---\n",
		"node-name: a\nmax-pods: 0x10\ndebug: true\ninterval: 1m30s\ndirs: [/a, /b]\nlabels: {a: b}\n",
		"Node-Name: upper case keys are what viper reads\n",
		"dirs: /one\nlabels: a=b\nhosts: {r.local:5000: {plainhttp: true, mirrors: m, port: 5}}\n",
		"max-pods: ~\n",                 // null: the default
		"node-name: &n x\nlabels: *n\n", // an alias is its anchor's value
	} {
		if ps, _ := check(t, content); len(ps) > 0 {
			t.Errorf("%q: %v", content, ps)
		}
	}
}

func TestProblems(t *testing.T) {
	for content, want := range map[string][]string{
		"node-nme: a\n":                   {`1:node-nme:unknown key (did you mean "node-name"?); remove it or correct its name: the keys are the flags listed by ` + "`cmd --help`"},
		"zzz: a\n":                        {"1:zzz:unknown key; remove it"},
		"max-pods: 1.5\n":                 {`1:max-pods:"1.5" is not a whole number`},
		"debug: yes\n":                    {`1:debug:"yes" is not true or false`},
		"interval: 30\n":                  {`1:interval:"30" is not a duration`},
		"dirs: a,b\n":                     {`1:dirs:"a,b" is one entry in the file; write a list instead: dirs: [a, b]`},
		"dirs: [[a]]\n":                   {"1:dirs:holds a list (line 1)"},
		"node-name: [a]\n":                {"1:node-name:is a list; give a single value (string)"},
		"labels: [a]\n":                   {"1:labels:is a list; give a value or a map"},
		"labels: {a: [b]}\n":              {"1:labels:holds a list; each entry must be a plain value"},
		"hosts:\n  r:\n    plain: true\n": {`3:hosts:hosts.r has an unknown field "plain"; the fields are mirrors, plainHTTP, Port`},
		"hosts: {r: {port: x}}\n":         {`1:hosts:hosts.r.port: "x" is not a whole number`},
		"hosts: [a]\n":                    {"1:hosts:hosts is a list; it must be a map"},
		"debug: true\ndebug: false\n":     {"2:debug:given twice (first on line 1); keep one"},
		"[1, 2]\n":                        {"1::the file is a list; it must be a mapping"},
		"a: x\nb: [\n":                    {"2::not valid YAML"},
	} {
		ps, _ := check(t, content)
		var got []string
		for _, p := range ps {
			got = append(got, strings.Join([]string{strconv.Itoa(p.Line), p.Key, p.Msg}, ":"))
		}
		if len(got) != len(want) {
			t.Errorf("%q: %d problems %q, want %q", content, len(got), got, want)
			continue
		}
		for i := range want {
			if !strings.HasPrefix(got[i], want[i]) {
				t.Errorf("%q: %q, want it to start with %q", content, got[i], want[i])
			}
		}
	}
}

func TestMissingFile(t *testing.T) {
	ps, _ := Check(filepath.Join(t.TempDir(), "none.yaml"), options())
	if len(ps) != 1 || !strings.Contains(ps[0].String(), "none.yaml: no such file; give the file to check with --config FILE") {
		t.Errorf("%v", ps)
	}
}

func TestLocate(t *testing.T) {
	lines := Lines{"node-name": 2, "images": 7, "trust": 5, "max-pods": 9}
	err := errors.Join(
		errors.New(`--node-name "X": not a DNS name`),
		errors.New("the trust policy: policy[0].images: empty"),
		errors.New("max-pods: -1 is negative"),
		errors.New("--node-ip is not an IP address"),
		errors.New("something about maximum-pods"),
	)
	got := Locate("f.yaml", lines, err)
	want := []string{
		`f.yaml:2: node-name: "X": not a DNS name`,
		"f.yaml:5: trust: the trust policy: policy[0].images: empty",
		"f.yaml:9: max-pods: -1 is negative",
		"f.yaml: --node-ip is not an IP address",
		"f.yaml: something about maximum-pods",
	}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("%q, want %q", got[i].String(), want[i])
		}
	}
	Sort(got)
	if got[0].Line != 2 || got[len(got)-1].Line != 0 {
		t.Errorf("sorted: %v", got)
	}
	if Locate("f.yaml", lines, nil) != nil {
		t.Error("no error, no problems")
	}
}

func TestErrorMessage(t *testing.T) {
	e := &Error{File: "f.yaml", Problems: []Problem{{File: "f.yaml", Line: 3, Key: "k", Msg: "bad"}}}
	if got := e.Error(); got != "f.yaml: 1 problem; fix the file and run config check again:\n  f.yaml:3: k: bad" {
		t.Errorf("%q", got)
	}
}
