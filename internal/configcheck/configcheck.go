package configcheck

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Problem is one thing wrong in a config file.
type Problem struct {
	File string
	// Line is the file's line, 0 when it is not known (a value that
	// came from the environment, or a check of several keys at once).
	Line int
	// Key is the top-level key at fault, "" when there is none.
	Key string
	// Msg says what is wrong and what to do about it.
	Msg string
}

// String is the compiler-style "FILE:LINE: key: message".
func (p Problem) String() string {
	loc := p.File
	if p.Line > 0 {
		loc = fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	if p.Key != "" {
		return fmt.Sprintf("%s: %s: %s", loc, p.Key, p.Msg)
	}
	return loc + ": " + p.Msg
}

// Error is a failed check with every problem found.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	what := "problems"
	if len(e.Problems) == 1 {
		what = "problem"
	}
	fmt.Fprintf(&b, "%s: %d %s; fix the file and run config check again:", e.File, len(e.Problems), what)
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

// Shape is what a key's value may be in the file when its flag's type
// does not say it: a flag declared as a string that also takes a map or
// a list in the file.
type Shape struct {
	Scalar, List, Map bool
	// Struct, when set, is the Go type the command decodes the value into
	// (with viper, hence mapstructure); the value is checked against its
	// fields.
	Struct reflect.Type
}

// Options say what a file is checked against.
type Options struct {
	// Flags are the command's flags: their names are the known keys and
	// their types the values' types.
	Flags *pflag.FlagSet
	// Shapes override the flag's type for some keys.
	Shapes map[string]Shape
	// Help is where a user finds the keys ("flotilla-agent run --help").
	Help string
}

// Lines maps the file's top-level keys to their lines.
type Lines map[string]int

// Check reads file and returns its problems and the lines of its keys.
// A file that cannot be read or parsed is one problem.
func Check(file string, o Options) ([]Problem, Lines) {
	lines := Lines{}
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return []Problem{{File: file, Msg: "no such file; give the file to check with --config FILE"}}, lines
	}
	if err != nil {
		return []Problem{{File: file, Msg: fmt.Sprintf("cannot read it: %v", err)}}, lines
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return []Problem{{File: file, Line: yamlErrLine(err), Msg: fmt.Sprintf("not valid YAML: %v; fix the syntax (indent with spaces, quote values with ': ' or '#')", err)}}, lines
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, lines // empty: every key has its default
	}
	root := resolve(doc.Content[0])
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, lines
	}
	if root.Kind != yaml.MappingNode {
		return []Problem{{File: file, Line: root.Line, Msg: fmt.Sprintf("the file is %s; it must be a mapping of keys to values (key: value, one per line)", kindOf(root))}}, lines
	}
	c := &checker{file: file, o: o}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		// viper lowercases keys, so Node-Name is node-name to the command.
		name := strings.ToLower(k.Value)
		if prev, dup := lines[name]; dup {
			c.add(k.Line, name, fmt.Sprintf("given twice (first on line %d); keep one", prev))
			continue
		}
		lines[name] = k.Line
		f := o.Flags.Lookup(name)
		if f == nil {
			c.add(k.Line, k.Value, c.unknown(name))
			continue
		}
		if s, ok := o.Shapes[name]; ok {
			c.shape(name, s, v)
			continue
		}
		if msg := flagValue(name, f.Value.Type(), v); msg != "" {
			c.add(v.Line, name, msg)
		}
	}
	return c.problems, lines
}

// Sort orders problems by line, those without a line last.
func Sort(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i].Line, ps[j].Line
		if a == 0 || b == 0 {
			return b == 0 && a != 0
		}
		return a < b
	})
}

type checker struct {
	file     string
	o        Options
	problems []Problem
}

func (c *checker) add(line int, key, msg string) {
	c.problems = append(c.problems, Problem{File: c.file, Line: line, Key: key, Msg: msg})
}

func (c *checker) unknown(name string) string {
	msg := "unknown key"
	if near := c.nearest(name); near != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	}
	msg += "; remove it or correct its name"
	if c.o.Help != "" {
		msg += ": the keys are the flags listed by `" + c.o.Help + "`"
	}
	return msg
}

// nearest is the known key closest to name, when it is a plausible typo.
func (c *checker) nearest(name string) string {
	best, bestD := "", 3
	c.o.Flags.VisitAll(func(f *pflag.Flag) {
		if d := distance(name, f.Name); d < bestD || (d == bestD && f.Name < best) {
			best, bestD = f.Name, d
		}
	})
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func (c *checker) shape(name string, s Shape, v *yaml.Node) {
	if isNull(v) {
		return
	}
	if s.Struct != nil {
		c.goType(name, name, s.Struct, v)
		return
	}
	ok := (s.Scalar && v.Kind == yaml.ScalarNode) || (s.List && v.Kind == yaml.SequenceNode) || (s.Map && v.Kind == yaml.MappingNode)
	if !ok {
		var want []string
		if s.Scalar {
			want = append(want, "a value")
		}
		if s.List {
			want = append(want, "a list")
		}
		if s.Map {
			want = append(want, "a map")
		}
		c.add(v.Line, name, fmt.Sprintf("is %s; give %s", kindOf(v), strings.Join(want, " or ")))
		return
	}
	// A list or map of values: each must be a plain value.
	for i, n := range v.Content {
		if v.Kind == yaml.MappingNode && i%2 == 0 {
			continue
		}
		if n = resolve(n); n.Kind != yaml.ScalarNode {
			c.add(n.Line, name, fmt.Sprintf("holds %s; each entry must be a plain value", kindOf(n)))
		}
	}
}

// goType checks v against the Go type t as mapstructure would decode it
// (field names from mapstructure tags, matched regardless of case).
func (c *checker) goType(key, path string, t reflect.Type, v *yaml.Node) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isNull(v) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if v.Kind != yaml.MappingNode {
			c.add(v.Line, key, fmt.Sprintf("%s is %s; it must be a map with the fields %s", path, kindOf(v), strings.Join(fieldNames(t), ", ")))
			return
		}
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, val := v.Content[i], resolve(v.Content[i+1])
			f, ok := field(t, k.Value)
			if !ok {
				c.add(k.Line, key, fmt.Sprintf("%s has an unknown field %q; the fields are %s", path, k.Value, strings.Join(fieldNames(t), ", ")))
				continue
			}
			c.goType(key, path+"."+k.Value, f.Type, val)
		}
	case reflect.Map:
		if v.Kind != yaml.MappingNode {
			c.add(v.Line, key, fmt.Sprintf("%s is %s; it must be a map", path, kindOf(v)))
			return
		}
		for i := 0; i+1 < len(v.Content); i += 2 {
			c.goType(key, path+"."+v.Content[i].Value, t.Elem(), resolve(v.Content[i+1]))
		}
	case reflect.Slice:
		switch v.Kind {
		case yaml.SequenceNode:
			for _, n := range v.Content {
				c.goType(key, path+"[]", t.Elem(), resolve(n))
			}
		case yaml.ScalarNode: // viper decodes weakly: one value is a list of one
			c.goType(key, path, t.Elem(), v)
		default:
			c.add(v.Line, key, fmt.Sprintf("%s is %s; it must be a list", path, kindOf(v)))
		}
	default:
		if v.Kind != yaml.ScalarNode {
			c.add(v.Line, key, fmt.Sprintf("%s is %s; it must be a plain value", path, kindOf(v)))
			return
		}
		if msg := scalar(t.Kind().String(), v.Value); msg != "" {
			c.add(v.Line, key, path+": "+msg)
		}
	}
}

// field finds the struct field a map key decodes into.
func field(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.IsExported() && strings.EqualFold(fieldName(f), name) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func fieldName(f reflect.StructField) string {
	if tag, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ","); tag != "" && tag != "-" {
		return tag
	}
	return f.Name
}

func fieldNames(t reflect.Type) []string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		if f := t.Field(i); f.IsExported() && f.Tag.Get("mapstructure") != "-" {
			names = append(names, fieldName(f))
		}
	}
	return names
}

// flagValue checks a top-level value against its flag's type.
func flagValue(key, typ string, v *yaml.Node) string {
	if isNull(v) {
		return "" // viper falls back to the default, as if the key were absent
	}
	switch typ {
	case "stringSlice", "stringArray":
		switch v.Kind {
		case yaml.SequenceNode:
			for _, n := range v.Content {
				if n = resolve(n); n.Kind != yaml.ScalarNode {
					return fmt.Sprintf("holds %s (line %d); each entry must be a plain value", kindOf(n), n.Line)
				}
			}
			return ""
		case yaml.ScalarNode:
			// viper splits a value from the file on spaces, not commas:
			// "a,b" would be one entry named "a,b".
			if strings.Contains(v.Value, ",") {
				return fmt.Sprintf("%q is one entry in the file; write a list instead: %s: [%s]", v.Value, key, strings.Join(strings.Split(v.Value, ","), ", "))
			}
			return ""
		}
		return fmt.Sprintf("is %s; give a list: %s: [a, b]", kindOf(v), key)
	}
	if v.Kind != yaml.ScalarNode {
		return fmt.Sprintf("is %s; give a single value (%s)", kindOf(v), typ)
	}
	return scalar(typ, v.Value)
}

// scalar checks a plain value against a flag or Go type name.
func scalar(typ, s string) string {
	switch typ {
	case "bool":
		if _, err := strconv.ParseBool(s); err != nil {
			return fmt.Sprintf("%q is not true or false; write true or false", s)
		}
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		if _, err := strconv.ParseInt(s, 0, 64); err != nil {
			return fmt.Sprintf("%q is not a whole number; write one such as 20", s)
		}
	case "duration":
		if _, err := time.ParseDuration(s); err != nil {
			return fmt.Sprintf("%q is not a duration; give a number with a unit: 30s, 5m, 1h", s)
		}
	}
	return ""
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "empty"
}

var lineRE = regexp.MustCompile(`line (\d+)`)

func yamlErrLine(err error) int {
	if m := lineRE.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

var flagRE = regexp.MustCompile(`--([a-z0-9][a-z0-9-]*)`)

// Locate turns the error of a command's own validation into problems:
// one per line of its message, at the line of the key it names ("--key",
// or the key's name) when the file has that key.
func Locate(file string, lines Lines, err error) []Problem {
	if err == nil {
		return nil
	}
	var out []Problem
	for _, msg := range strings.Split(err.Error(), "\n") {
		if msg = strings.TrimSpace(msg); msg == "" {
			continue
		}
		p := Problem{File: file, Msg: msg}
		for _, m := range flagRE.FindAllStringSubmatch(msg, -1) {
			if l, ok := lines[m[1]]; ok {
				p.Line, p.Key = l, m[1]
				break
			}
		}
		if p.Line == 0 {
			// The key named first is the one the message is about
			// ("the trust policy: ... policy[0].images").
			best := -1
			for k, l := range lines {
				if i := wordIndex(msg, k); i >= 0 && (best < 0 || i < best || (i == best && len(k) > len(p.Key))) {
					best, p.Line, p.Key = i, l, k
				}
			}
		}
		if p.Key != "" {
			// The key is printed before the message: do not say it twice.
			for _, prefix := range []string{p.Key + ": ", "--" + p.Key + ": ", "--" + p.Key + " "} {
				p.Msg = strings.TrimPrefix(p.Msg, prefix)
			}
		}
		out = append(out, p)
	}
	return out
}

// wordIndex is where word first appears in s with no name character
// (letter, digit or dash) right before or after it; -1 when it does not.
func wordIndex(s, word string) int {
	isName := func(b byte) bool {
		return b == '-' || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9')
	}
	for i := 0; ; {
		j := strings.Index(s[i:], word)
		if j < 0 {
			return -1
		}
		j += i
		end := j + len(word)
		if (j == 0 || !isName(s[j-1])) && (end == len(s) || !isName(s[end])) {
			return j
		}
		i = j + 1
	}
}

// File checks file in full, as both daemons' `config check` do: first its
// keys and their shapes, then, when those are right, the command's own
// validation (validate), whose errors are placed on the lines of the keys
// they name. It prints "FILE: ok" to out, or returns an *Error.
func File(file string, o Options, validate func() error, out io.Writer) error {
	problems, lines := Check(file, o)
	if len(problems) == 0 {
		problems = Locate(file, lines, validate())
	}
	if len(problems) > 0 {
		Sort(problems)
		return &Error{File: file, Problems: problems}
	}
	fmt.Fprintf(out, "%s: ok\n", file)
	return nil
}

// LogLevel checks a log-level value: the daemons fall back to info on a
// bad one, which in a config file is still a mistake.
func LogLevel(value string) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(value)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", value)
	}
	return nil
}
