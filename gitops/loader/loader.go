package loader

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Limits that keep one bad commit from taking the hub's memory.
const (
	// MaxFileSize is the largest manifest file read.
	MaxFileSize = 8 << 20
	// MaxObjects is the most objects one revision may hold.
	MaxObjects = 20000
	// maxErrors bounds the errors collected from one revision.
	maxErrors = 200
)

// IgnoreFile names the files that exclude paths from loading, with
// .gitignore syntax, relative to the directory they are in.
const IgnoreFile = ".flotillaignore"

// Object is one manifest and where it came from.
type Object struct {
	Obj *unstructured.Unstructured
	// File is the path inside the repository; for objects built by
	// kustomize, the kustomization file.
	File string
	// Line is where the document starts in File (1-based; 0 when unknown,
	// as for kustomize output).
	Line int
}

// ID names the object as people read it: "Kind namespace/name".
func (o Object) ID() string { return ObjectID(o.Obj) }

// ObjectID names an object as "Kind namespace/name" or "Kind name".
func ObjectID(u *unstructured.Unstructured) string {
	if u.GetNamespace() != "" {
		return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
	}
	return u.GetKind() + " " + u.GetName()
}

// Error is one problem in one file.
type Error struct {
	File string
	Line int
	// Object names the object the error is about, when known.
	Object string
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	if e.Object != "" {
		b.WriteString(": " + e.Object)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// Errors is every problem found in a revision. Load returns it (as an
// error) when any file is bad.
type Errors []*Error

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// ErrNoPath means a configured path is not in the commit.
var ErrNoPath = errors.New("path not found in the commit")

// Load reads every manifest under paths (the whole tree when empty) of
// fsys. It reads all files before returning so that the error lists every
// bad file, not just the first. The returned error is Errors when files are
// bad, or wraps ErrNoPath or an I/O error.
func Load(fsys fs.FS, paths []string) ([]Object, error) {
	l := &load{fsys: fsys, ignores: map[string][]gitignore.Pattern{}, done: map[string]bool{}}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	seen := map[string]bool{}
	for _, p := range paths {
		p = path.Clean(strings.TrimPrefix(p, "/"))
		if seen[p] {
			continue
		}
		seen[p] = true
		if err := l.walk(p); err != nil {
			return nil, err
		}
	}
	if len(l.errs) > 0 {
		return nil, l.errs
	}
	return l.objs, nil
}

type load struct {
	fsys    fs.FS
	objs    []Object
	errs    Errors
	ignores map[string][]gitignore.Pattern
	kfs     *kustomizeFS
	// done keeps a file or kustomization that two paths reach from being
	// loaded twice.
	done map[string]bool
}

func (l *load) fail(file string, line int, object, format string, args ...any) {
	if len(l.errs) >= maxErrors {
		return
	}
	if len(l.errs) == maxErrors-1 {
		l.errs = append(l.errs, &Error{File: file, Msg: "too many errors; fix these first"})
		return
	}
	l.errs = append(l.errs, &Error{File: file, Line: line, Object: object, Msg: fmt.Sprintf(format, args...)})
}

func (l *load) add(o Object) {
	if len(l.objs) >= MaxObjects {
		if len(l.objs) == MaxObjects {
			l.fail(o.File, o.Line, "", "the revision holds more than %d objects; split it across several sources", MaxObjects)
			l.objs = append(l.objs, o)
		}
		return
	}
	l.objs = append(l.objs, o)
}

func (l *load) walk(root string) error {
	st, err := fs.Stat(l.fsys, root)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%q: %w: check spec.paths", root, ErrNoPath)
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", root, err)
	}
	if !st.IsDir() {
		if l.ignored(root, false) {
			return nil
		}
		return l.file(root)
	}
	return fs.WalkDir(l.fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || l.ignored(p, true)) {
				return fs.SkipDir
			}
			if k := kustomizationIn(l.fsys, p); k != "" {
				if !l.done[p+"/"] {
					l.done[p+"/"] = true
					if err := l.kustomize(p, k); err != nil {
						return err
					}
				}
				return fs.SkipDir
			}
			return nil
		}
		if !isManifest(d.Name()) || l.ignored(p, false) {
			return nil
		}
		return l.file(p)
	})
}

func isManifest(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

func (l *load) file(p string) error {
	if l.done[p] {
		return nil
	}
	l.done[p] = true
	f, err := l.fsys.Open(p)
	if err != nil {
		return fmt.Errorf("opening %s: %w", p, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return fmt.Errorf("reading %s: %w", p, err)
	}
	if len(data) > MaxFileSize {
		l.fail(p, 0, "", "the file is larger than %d bytes", MaxFileSize)
		return nil
	}
	if strings.EqualFold(path.Ext(p), ".json") {
		l.parseJSON(p, data)
	} else {
		l.parseYAML(p, data)
	}
	return nil
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// lineOf finds the line a yaml.v3 error names; the decoder reports it only
// in the message.
func lineOf(err error) int {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// parserErrors are yaml.v3's parser (not scanner) messages, which it
// reports with a 0-based line: the line where the unfinished block or
// flow began.
var parserErrors = []string{
	"did not find expected key", "did not find expected node content", "did not find expected ',' or ']'",
	"did not find expected ',' or '}'", "did not find expected '-' indicator", "did not find expected <document start>",
}

// syntaxError returns the 1-based line of a yaml.v3 syntax error and its
// message without the line.
func syntaxError(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := lineOf(err)
	if m := yamlLinePrefix.FindString(msg); m != "" {
		msg = msg[len(m):]
	}
	for _, p := range parserErrors {
		if strings.Contains(msg, p) {
			line++
			break
		}
	}
	return line, msg
}

var yamlLinePrefix = regexp.MustCompile(`^line \d+: `)

func (l *load) parseYAML(file string, data []byte) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			line, msg := syntaxError(err)
			l.fail(file, line, "", "invalid YAML: %s", msg)
			return
		}
		if len(doc.Content) == 0 {
			continue
		}
		n := doc.Content[0]
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			continue
		}
		var v any
		if err := n.Decode(&v); err != nil {
			line := lineOf(err)
			if line == 0 {
				line = n.Line
			}
			msg := strings.ReplaceAll(strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n"), "\n", ";")
			l.fail(file, line, "", "invalid YAML: %s", strings.TrimSpace(strings.TrimPrefix(msg, "yaml: ")))
			continue
		}
		cv, err := jsonValue(v, 0)
		if err != nil {
			l.fail(file, n.Line, "", "%v", err)
			continue
		}
		items := itemLines(n)
		l.object(file, n.Line, cv, items)
	}
}

// itemLines gives the line of each element of a List's items.
func itemLines(n *yaml.Node) []int {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "items" && n.Content[i+1].Kind == yaml.SequenceNode {
			lines := make([]int, len(n.Content[i+1].Content))
			for j, c := range n.Content[i+1].Content {
				lines[j] = c.Line
			}
			return lines
		}
	}
	return nil
}

func (l *load) parseJSON(file string, data []byte) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		start := int(dec.InputOffset())
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			off := start
			var se *json.SyntaxError
			var te *json.UnmarshalTypeError
			switch {
			case errors.As(err, &se):
				off = int(se.Offset)
			case errors.As(err, &te):
				off = int(te.Offset)
			case errors.Is(err, io.ErrUnexpectedEOF):
				off = len(data)
			}
			l.fail(file, lineAt(data, off), "", "invalid JSON: %v", err)
			return
		}
		line := lineAt(data, start+leadingSpace(data[start:]))
		cv, err := jsonValue(v, 0)
		if err != nil {
			l.fail(file, line, "", "%v", err)
			continue
		}
		l.object(file, line, cv, nil)
	}
}

func leadingSpace(b []byte) int {
	return len(b) - len(bytes.TrimLeft(b, " \t\r\n"))
}

func lineAt(data []byte, off int) int {
	if off > len(data) {
		off = len(data)
	}
	if off < 0 {
		off = 0
	}
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// object checks one document and adds it, or its items when it is a List.
func (l *load) object(file string, line int, v any, itemLines []int) {
	switch t := v.(type) {
	case []any:
		// A JSON array of objects.
		for _, it := range t {
			l.object(file, line, it, nil)
		}
		return
	case map[string]any:
		u := &unstructured.Unstructured{Object: t}
		if u.IsList() {
			items, _, _ := unstructured.NestedSlice(t, "items")
			for i, it := range items {
				il := line
				if i < len(itemLines) {
					il = itemLines[i]
				}
				l.object(file, il, it, nil)
			}
			return
		}
		if msg := checkObject(u); msg != "" {
			l.fail(file, line, describe(u), "%s", msg)
			return
		}
		l.add(Object{Obj: u, File: file, Line: line})
	default:
		l.fail(file, line, "", "a manifest must be a mapping with apiVersion, kind and metadata, not %s", typeName(v))
	}
}

func describe(u *unstructured.Unstructured) string {
	if u.GetKind() == "" || u.GetName() == "" {
		return ""
	}
	return ObjectID(u)
}

// checkObject reports what keeps a mapping from being an object.
func checkObject(u *unstructured.Unstructured) string {
	var missing []string
	if s, ok := u.Object["apiVersion"].(string); !ok || s == "" {
		missing = append(missing, "apiVersion")
	}
	if s, ok := u.Object["kind"].(string); !ok || s == "" {
		missing = append(missing, "kind")
	}
	md, ok := u.Object["metadata"].(map[string]any)
	if _, present := u.Object["metadata"]; present && !ok {
		return "metadata must be a mapping"
	}
	if name, _ := md["name"].(string); name == "" {
		if _, gen := md["generateName"]; gen {
			return "metadata.generateName is not supported: an object applied from Git needs a fixed metadata.name"
		}
		missing = append(missing, "metadata.name")
	}
	if len(missing) > 0 {
		return "missing " + strings.Join(missing, ", ")
	}
	if ns, present := md["namespace"]; present {
		if _, ok := ns.(string); !ok {
			return "metadata.namespace must be a string"
		}
	}
	for _, f := range []string{"labels", "annotations"} {
		if m, present := md[f]; present && m != nil {
			mm, ok := m.(map[string]any)
			if !ok {
				return "metadata." + f + " must be a mapping of strings"
			}
			for k, v := range mm {
				if _, ok := v.(string); !ok {
					return fmt.Sprintf("metadata.%s[%q] must be a string (quote it)", f, k)
				}
			}
		}
	}
	return ""
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64:
		return "a number"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%T", v)
}

// jsonValue converts a decoded YAML or JSON value into the types
// unstructured objects hold (int64, float64, string, bool, nil, []any,
// map[string]any).
func jsonValue(v any, depth int) (any, error) {
	if depth > 100 {
		return nil, errors.New("the document is nested more than 100 levels deep")
	}
	switch t := v.(type) {
	case nil, string, bool, int64:
		return t, nil
	case int:
		return int64(t), nil
	case int32:
		return int64(t), nil
	case uint64:
		if t > math.MaxInt64 {
			return float64(t), nil
		}
		return int64(t), nil
	case uint:
		return int64(t), nil
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return nil, fmt.Errorf("%v is not a number JSON can hold", t)
		}
		return t, nil
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i, nil
		}
		f, err := t.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", t, err)
		}
		return f, nil
	case time.Time:
		return t.UTC().Format(time.RFC3339Nano), nil
	case []byte:
		return string(t), nil
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			c, err := jsonValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			c, err := jsonValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("mapping key %v is not a string (quote it)", k)
			}
			c, err := jsonValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[ks] = c
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported value %v (%T)", v, v)
}
