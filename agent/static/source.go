package static

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/defaults"
	"flotilla.dev/flotilla/api/validation"
)

// ErrConfig is returned by New for a configuration that cannot work.
var ErrConfig = errors.New("invalid static pod configuration")

const (
	// DefaultDir is where static pod manifests live unless --manifests-dir
	// says otherwise.
	DefaultDir = "/etc/flotilla/manifests"
	// DefaultInterval is how often the directory is rescanned even when
	// fsnotify reports nothing.
	DefaultInterval = time.Second
	// ConfigSourceFile is the value of api.AnnotationConfigSource on pods
	// from manifest files, as in Kubernetes.
	ConfigSourceFile = "file"

	// maxFileSize bounds what is read from one manifest: a pod is at most
	// api.MaxObjectSize on the hub, and a stray multi-gigabyte file must
	// not exhaust a small device's memory.
	maxFileSize = 4 * api.MaxObjectSize
	// settleDelay lets a burst of events (an editor truncating then
	// writing, a tool writing in chunks) end before the directory is read,
	// so that a half-written file is seen as seldom as possible.
	settleDelay = 50 * time.Millisecond
)

// Config configures a Source.
type Config struct {
	// Dir holds the manifests; DefaultDir when empty. It must be absolute
	// and need not exist.
	Dir string
	// NodeName is this device's Node name (required): it is part of every
	// static pod's name and UID.
	NodeName string
	// Log receives the source's messages; slog.Default() when nil.
	Log *slog.Logger
	// Interval is the rescan period; DefaultInterval when zero.
	Interval time.Duration
}

func (c Config) withDefaults() (Config, error) {
	var problems []error
	if c.NodeName == "" {
		problems = append(problems, errors.New("NodeName is required"))
	} else if msgs := utilvalidation.IsDNS1123Subdomain(c.NodeName); len(msgs) > 0 {
		problems = append(problems, fmt.Errorf("NodeName %q: %s", c.NodeName, strings.Join(msgs, "; ")))
	}
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if !filepath.IsAbs(c.Dir) {
		problems = append(problems, fmt.Errorf("manifests directory %q must be an absolute path", c.Dir))
	}
	if c.Interval < 0 {
		problems = append(problems, fmt.Errorf("Interval %v must not be negative", c.Interval))
	}
	if err := errors.Join(problems...); err != nil {
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c.Dir = filepath.Clean(c.Dir)
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c, nil
}

// Source is the static pods of one manifest directory. It has the method
// set of the kubelet's PodSource. Pods it returns are shared and must not
// be modified.
type Source struct {
	cfg     Config
	log     *slog.Logger
	running atomic.Bool

	mu     sync.RWMutex
	pods   map[types.UID]*corev1.Pod
	errs   map[string]error
	synced bool

	// The rest belongs to the goroutine in Run.
	cache    map[string]fileResult // last decode of each file, by path
	reported map[string]string     // problem last logged, by path
	filePods map[string][]string   // pods last accepted from each file
	fileOf   map[types.UID]string  // file of each current pod, for messages
	dirState string                // last logged state of the directory
	watched  os.FileInfo           // the directory fsnotify watches
}

// fileResult is what one file decoded to.
type fileResult struct {
	data  []byte
	pods  []*corev1.Pod
	lines []int // line of each pod's document
	err   error
}

// scanResult is the directory's desired state, from one scan.
type scanResult struct {
	pods   map[types.UID]*corev1.Pod
	errs   map[string]error
	byFile map[string][]string // namespace/name of the pods taken from each file
	fileOf map[types.UID]string
}

// New returns the static pods of cfg.Dir. Nothing is read until Run.
func New(cfg Config) (*Source, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Source{
		cfg:      cfg,
		log:      cfg.Log.With("source", "static", "dir", cfg.Dir),
		pods:     map[types.UID]*corev1.Pod{},
		errs:     map[string]error{},
		cache:    map[string]fileResult{},
		reported: map[string]string{},
		filePods: map[string][]string{},
		fileOf:   map[types.UID]string{},
	}, nil
}

// Name implements PodSource.
func (s *Source) Name() string { return "static" }

// HasSynced reports whether the directory was read once, whatever was
// found: a missing directory is a valid, empty set of static pods.
func (s *Source) HasSynced() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.synced
}

// Get returns the static pod with uid.
func (s *Source) Get(uid types.UID) (*corev1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.pods[uid]
	return p, ok
}

// List returns every static pod, ordered by namespace and name.
func (s *Source) List() []*corev1.Pod {
	s.mu.RLock()
	out := make([]*corev1.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		out = append(out, p)
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Errors returns the current problem of every manifest that is not (or
// not entirely) running, by file path. A problem with the directory
// itself is under the directory's path.
func (s *Source) Errors() map[string]error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]error, len(s.errs))
	for k, v := range s.errs {
		out[k] = v
	}
	return out
}

// Run keeps the set of static pods current until ctx ends, calling notify
// with the UID of every pod added or removed (an edited manifest is a
// removal and an addition, since its UID changes). It returns nil when
// ctx ends; a second concurrent Run is an error.
func (s *Source) Run(ctx context.Context, notify func(types.UID)) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("static pod source: Run is already running")
	}
	defer s.running.Store(false)

	// Without fsnotify (inotify instances exhausted, an unsupported
	// filesystem) the rescan alone still finds every change.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn("cannot watch the manifests directory; relying on the periodic rescan", "interval", s.cfg.Interval, "err", err)
		w = nil
	} else {
		defer w.Close()
	}
	var events <-chan fsnotify.Event
	var watchErrs <-chan error
	if w != nil {
		events, watchErrs = w.Events, w.Errors
	}

	s.sync(w, notify)
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			s.sync(w, notify)
		case <-settle:
			settle = nil
			s.sync(w, notify)
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if ev.Name == s.cfg.Dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// The watch died with the directory; re-add it on the
				// next sync even if a new directory reuses the inode.
				s.watched = nil
			}
			if ev.Op != fsnotify.Chmod && settle == nil {
				settle = time.After(settleDelay)
			}
		case err, ok := <-watchErrs:
			if !ok {
				watchErrs = nil
				continue
			}
			// An overflow loses events; the rescan makes up for it.
			s.log.Debug("fsnotify error; the rescan covers it", "err", err)
			if settle == nil {
				settle = time.After(settleDelay)
			}
		}
	}
}

// Load reads the directory once, for a tool that wants the set without
// running the source (`flotilla-agent pods` on a stopped agent).
func (s *Source) Load() {
	s.sync(nil, func(types.UID) {})
}

// sync reads the directory, replaces the pod set and notifies changes.
func (s *Source) sync(w *fsnotify.Watcher, notify func(types.UID)) {
	files, dirErr := s.readDir(w)
	if dirErr != nil {
		// An unreadable directory says nothing about which pods should
		// run, so the last known set stays.
		s.mu.Lock()
		s.errs = map[string]error{s.cfg.Dir: dirErr}
		s.synced = true
		s.mu.Unlock()
		return
	}
	res := s.scan(files)
	s.report(res.errs, res.byFile)
	changed := s.swap(res)
	for _, uid := range changed {
		notify(uid)
	}
}

// readDir lists the manifest files, keeps the fsnotify watch on the
// directory and logs, once per change, whether the directory exists.
// A missing directory is an empty list, not an error.
func (s *Source) readDir(w *fsnotify.Watcher) ([]string, error) {
	info, err := os.Stat(s.cfg.Dir)
	if err == nil && !info.IsDir() {
		err = fmt.Errorf("%s is not a directory: remove it or point --manifests-dir elsewhere", s.cfg.Dir)
	}
	var entries []os.DirEntry
	if err == nil {
		entries, err = os.ReadDir(s.cfg.Dir)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.unwatch(w)
		s.dirStateIs("missing", func() {
			s.log.Info("manifests directory does not exist; static pods start when it is created")
		})
		return nil, nil
	case err != nil:
		s.unwatch(w)
		s.dirStateIs("error: "+err.Error(), func() {
			s.log.Warn("cannot read the manifests directory; keeping the current static pods", "err", err)
		})
		return nil, fmt.Errorf("read manifests directory: %w", err)
	}
	s.dirStateIs("ok", func() {
		switch {
		case s.dirState == "missing":
			s.log.Info("manifests directory appeared")
		case s.dirState != "":
			s.log.Info("manifests directory is readable again")
		}
	})
	s.watch(w, info)
	var files []string
	for _, e := range entries {
		if p, ok := s.manifestPath(e); ok {
			files = append(files, p)
		}
	}
	return files, nil
}

// dirStateIs runs log when the directory's state changed since last time.
func (s *Source) dirStateIs(state string, log func()) {
	if s.dirState != state {
		log()
		s.dirState = state
	}
}

// manifestPath says whether the entry is a manifest: a regular file (or a
// link to one) named *.yaml or *.yml that is neither hidden nor an editor
// backup. Hidden files are how editors and tools stage writes.
func (s *Source) manifestPath(e os.DirEntry) (string, bool) {
	name := e.Name()
	if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") {
		return "", false
	}
	if ext := filepath.Ext(name); ext != ".yaml" && ext != ".yml" {
		return "", false
	}
	p := filepath.Join(s.cfg.Dir, name)
	info, err := os.Stat(p) // follows links, as ConfigMap-style directories use them
	if err != nil || !info.Mode().IsRegular() {
		return "", false
	}
	return p, true
}

func (s *Source) watch(w *fsnotify.Watcher, info os.FileInfo) {
	if w == nil {
		return
	}
	if s.watched != nil && os.SameFile(s.watched, info) && slices.Contains(w.WatchList(), s.cfg.Dir) {
		return
	}
	_ = w.Remove(s.cfg.Dir) // a stale watch of a deleted directory
	if err := w.Add(s.cfg.Dir); err != nil {
		s.log.Debug("cannot watch the manifests directory; the rescan covers it", "err", err)
		s.watched = nil
		return
	}
	s.watched = info
}

func (s *Source) unwatch(w *fsnotify.Watcher) {
	if w != nil && s.watched != nil {
		_ = w.Remove(s.cfg.Dir)
	}
	s.watched = nil
}

// scan decodes files in name order. When two files define the same pod,
// the first one's wins: the choice must not depend on the order in which
// events arrived.
func (s *Source) scan(files []string) scanResult {
	out := scanResult{
		pods:   map[types.UID]*corev1.Pod{},
		errs:   map[string]error{},
		byFile: map[string][]string{},
		fileOf: map[types.UID]string{},
	}
	owner := map[string]string{} // namespace/name -> file
	seen := map[string]bool{}
	for _, f := range files {
		res, ok := s.load(f)
		if !ok {
			continue // gone since the directory was read
		}
		seen[f] = true
		if res.err != nil {
			out.errs[f] = res.err
			continue
		}
		var dups []error
		for i, p := range res.pods {
			key := p.Namespace + "/" + p.Name
			if other, taken := owner[key]; taken {
				dups = append(dups, &ManifestError{File: f, Line: res.lines[i], Field: "metadata.name",
					Problem: fmt.Sprintf("pod %s is already defined in %s, which wins by file name; rename one of them", key, other)})
				continue
			}
			owner[key] = f
			out.pods[p.UID] = p
			out.fileOf[p.UID] = f
			out.byFile[f] = append(out.byFile[f], key)
		}
		if len(dups) > 0 {
			out.errs[f] = errors.Join(dups...)
		}
	}
	for f := range s.cache {
		if !seen[f] {
			delete(s.cache, f)
		}
	}
	return out
}

// load returns the decoded file, from the cache when its bytes did not
// change; ok is false when the file no longer exists.
func (s *Source) load(path string) (fileResult, bool) {
	data, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileResult{}, false
	}
	if err != nil {
		return fileResult{err: &ManifestError{File: path, Problem: err.Error()}}, true
	}
	if c, ok := s.cache[path]; ok && bytes.Equal(c.data, data) {
		return c, true
	}
	res := decodeFile(path, data, s.cfg.NodeName)
	res.data = data
	s.cache[path] = res
	return res, true
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("larger than %d bytes: a manifest this big is not a pod; move it out of the directory", maxFileSize)
	}
	return data, nil
}

// report logs each file's problem once per change, and says clearly when
// a file that ran pods turned bad and they are being stopped.
func (s *Source) report(errs map[string]error, byFile map[string][]string) {
	for _, f := range sortedKeys(errs) {
		msg := errs[f].Error()
		if s.reported[f] == msg {
			continue
		}
		s.reported[f] = msg
		if _, partly := byFile[f]; !partly && len(s.filePods[f]) > 0 {
			s.log.Warn("static pod manifest is now invalid; stopping its pods, as Kubernetes does, until it is fixed",
				"file", f, "pods", s.filePods[f], "err", errs[f])
			continue
		}
		s.log.Warn("static pod manifest rejected; fix it and it is read again within seconds", "file", f, "err", errs[f])
	}
	for f := range s.reported {
		if _, bad := errs[f]; bad {
			continue
		}
		if _, exists := byFile[f]; exists {
			s.log.Info("static pod manifest is valid again", "file", f)
		}
		delete(s.reported, f)
	}
	s.filePods = byFile
}

// swap installs the new set and returns the UIDs that appeared or left.
func (s *Source) swap(res scanResult) []types.UID {
	s.mu.Lock()
	old := s.pods
	s.pods, s.errs, s.synced = res.pods, res.errs, true
	s.mu.Unlock()

	var changed []types.UID
	for uid, p := range res.pods {
		if _, ok := old[uid]; !ok {
			s.log.Info("static pod added", "pod", p.Namespace+"/"+p.Name, "uid", uid, "file", res.fileOf[uid])
			changed = append(changed, uid)
		}
	}
	for uid, p := range old {
		if _, ok := res.pods[uid]; !ok {
			s.log.Info("static pod removed", "pod", p.Namespace+"/"+p.Name, "uid", uid, "file", s.fileOf[uid])
			changed = append(changed, uid)
		}
	}
	s.fileOf = res.fileOf
	return changed
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ManifestError is one problem in a manifest file.
type ManifestError struct {
	File string
	// Line is the 1-based line of the problem, or of the start of the
	// document it is in; 0 when unknown.
	Line int
	// Field is the JSON path of the field at fault ("spec.containers[0].image"),
	// empty when the problem is not about one field.
	Field string
	// Problem says what is wrong and, where it is not obvious, what to do.
	Problem string
}

func (e *ManifestError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		return loc + ": " + e.Field + ": " + e.Problem
	}
	return loc + ": " + e.Problem
}

// strictDecoder rejects unknown and duplicate fields: a misspelt field in
// a manifest would otherwise be dropped without a word, and the pod would
// run differently from what its author reads.
var strictDecoder = serializer.NewCodecFactory(api.Scheme, serializer.EnableStrict).UniversalDeserializer()

// document is one YAML document of a file.
type document struct {
	line  int // 1-based line of its first line in the file
	body  []byte
	lines []string
}

// decodeFile returns the static pods of one file, or every problem in it.
// A file is all or nothing: running half of what a file describes is
// rarely what its author wants.
func decodeFile(path string, data []byte, node string) fileResult {
	var res fileResult
	var problems []error
	names := map[string]int{}
	for _, doc := range splitDocuments(data) {
		if blank(doc.body) {
			continue
		}
		p, errs := decodePod(path, doc)
		if len(errs) == 0 {
			errs = makeStatic(path, doc, p, node)
		}
		if len(errs) > 0 {
			problems = append(problems, errs...)
			continue
		}
		key := p.Namespace + "/" + p.Name
		if line, dup := names[key]; dup {
			problems = append(problems, &ManifestError{File: path, Line: doc.line, Field: "metadata.name",
				Problem: fmt.Sprintf("pod %s is defined twice in this file (first at line %d); rename one", key, line)})
			continue
		}
		names[key] = doc.line
		res.pods = append(res.pods, p)
		res.lines = append(res.lines, doc.line)
	}
	if len(problems) > 0 {
		return fileResult{err: errors.Join(problems...)}
	}
	return res
}

// splitDocuments splits a multi-document YAML stream at "---" lines,
// keeping each document's position so errors can name file lines.
func splitDocuments(data []byte) []document {
	var docs []document
	cur := document{line: 1}
	var body bytes.Buffer
	lines := strings.SplitAfter(string(data), "\n")
	for i, l := range lines {
		if isSeparator(l) {
			cur.body = append([]byte(nil), body.Bytes()...)
			docs = append(docs, cur)
			cur, body = document{line: i + 2}, bytes.Buffer{}
			continue
		}
		body.WriteString(l)
		cur.lines = append(cur.lines, strings.TrimRight(l, "\r\n"))
	}
	cur.body = body.Bytes()
	return append(docs, cur)
}

func isSeparator(line string) bool {
	t := strings.TrimRight(line, " \t\r\n")
	return t == "---" || strings.HasPrefix(t, "--- #") || strings.HasPrefix(t, "---\t#")
}

// blank reports whether a document holds only comments and whitespace,
// as a leading or trailing "---" leaves.
func blank(body []byte) bool {
	for _, l := range strings.Split(string(body), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

var (
	yamlLineRE    = regexp.MustCompile(`line (\d+): `)
	strictFieldRE = regexp.MustCompile(`^(unknown|duplicate) field "(.*)"$`)
	jsonTypeRE    = regexp.MustCompile(`json: cannot unmarshal (\w+) into Go struct field [^.\s]+\.(\S+) of type (\S+)`)
)

// decodePod decodes one document into a v1 Pod, strictly.
func decodePod(path string, doc document) (*corev1.Pod, []error) {
	problem := func(line int, fieldPath, msg string) []error {
		if line == 0 {
			line = doc.line
		}
		return []error{&ManifestError{File: path, Line: line, Field: fieldPath, Problem: msg}}
	}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc.body, &tm); err != nil {
		return nil, problem(yamlLine(doc, err), "", syntaxProblem(err))
	}
	if tm.APIVersion != "v1" || tm.Kind != "Pod" {
		return nil, problem(0, "", kindProblem(tm))
	}
	obj, _, err := strictDecoder.Decode(doc.body, nil, nil)
	if err != nil && runtime.IsStrictDecodingError(err) {
		return nil, strictProblems(path, doc, err)
	}
	if err != nil {
		if m := jsonTypeRE.FindStringSubmatch(err.Error()); m != nil {
			return nil, problem(lineOf(doc, m[2]), m[2], fmt.Sprintf("is a %s here but must be a %s", m[1], m[3]))
		}
		return nil, problem(yamlLine(doc, err), "", syntaxProblem(err))
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, problem(0, "", fmt.Sprintf("decoded to %T, not a Pod", obj))
	}
	return p, nil
}

func syntaxProblem(err error) string {
	msg := yamlMessage(err)
	if strings.Contains(msg, "yaml:") {
		return "invalid YAML (" + msg + "): check the indentation and quoting around this line"
	}
	return "the document must be a YAML mapping of a Pod (apiVersion: v1, kind: Pod, metadata, spec): " + msg
}

func kindProblem(tm metav1.TypeMeta) string {
	const want = "a static pod manifest holds only Pods: apiVersion: v1, kind: Pod"
	switch {
	case tm.APIVersion == "" && tm.Kind == "":
		return "apiVersion and kind are missing; " + want
	case tm.Kind == "Pod":
		return fmt.Sprintf("apiVersion is %q; %s", tm.APIVersion, want)
	case tm.Kind == "":
		return "kind is missing; " + want
	default:
		return fmt.Sprintf("found %s %s; %s (workloads such as Deployments need the hub: apply them there)", tm.APIVersion, tm.Kind, want)
	}
}

// strictProblems turns a strict decoding error into one problem per field.
func strictProblems(path string, doc document, err error) []error {
	se, ok := runtime.AsStrictDecodingError(err)
	if !ok {
		return []error{&ManifestError{File: path, Line: doc.line, Problem: err.Error()}}
	}
	var out []error
	for _, e := range se.Errors() {
		msg := e.Error()
		if m := strictFieldRE.FindStringSubmatch(msg); m != nil {
			advice := "remove it or correct its spelling (see kubectl explain pod." + strings.TrimPrefix(parentPath(m[2]), ".") + ")"
			if m[1] == "duplicate" {
				advice = "it is set twice; keep one"
			}
			out = append(out, &ManifestError{File: path, Line: lineOf(doc, m[2]), Field: m[2], Problem: m[1] + " field: " + advice})
			continue
		}
		out = append(out, &ManifestError{File: path, Line: yamlLine(doc, e), Problem: yamlMessage(e)})
	}
	return out
}

// parentPath drops the last element and list indices of a field path,
// which is the form kubectl explain takes.
func parentPath(p string) string {
	segs := parseFieldPath(p)
	var keys []string
	for _, s := range segs[:max(len(segs)-1, 0)] {
		if s.index < 0 {
			keys = append(keys, s.key)
		}
	}
	return strings.Join(keys, ".")
}

// yamlLine is the file line of a YAML parser error, or 0.
func yamlLine(doc document, err error) int {
	m := yamlLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return doc.line + n - 1
}

// yamlMessage strips the parser's own line number (which counts from the
// document, not the file) and its conversion prefix.
func yamlMessage(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = yamlLineRE.ReplaceAllString(msg, "")
	return strings.Join(strings.Fields(msg), " ")
}

// makeStatic turns a decoded pod into the static pod the kubelet runs, as
// Kubernetes' file source does, and validates it as the hub would.
func makeStatic(path string, doc document, p *corev1.Pod, node string) []error {
	if p.Name == "" {
		return []error{&ManifestError{File: path, Line: doc.line, Field: "metadata.name",
			Problem: fmt.Sprintf("Required value: name the pod; it runs as <name>-%s", node)}}
	}
	clearServerFields(p)
	if p.Namespace == "" {
		p.Namespace = metav1.NamespaceDefault
	}
	uid, err := podUID(node, path, p)
	if err != nil {
		return []error{&ManifestError{File: path, Line: doc.line, Problem: err.Error()}}
	}
	p.Name = p.Name + "-" + node
	p.Spec.NodeName = node
	defaults.Default(p)
	p.UID = uid
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[api.AnnotationConfigSource] = ConfigSourceFile
	p.Annotations[api.AnnotationConfigHash] = string(uid)

	// Tag-only images are allowed: the hub's digest policy guards what the
	// hub distributes, and whoever writes this directory already has the
	// device. validation.Options has no other knob that applies to pods.
	errs := validation.ValidateCreate(p, validation.Options{AllowTagImages: true})
	errs = append(errs, apiReferences(p)...)
	if len(errs) > 0 {
		out := make([]error, 0, len(errs))
		for _, fe := range errs {
			out = append(out, &ManifestError{File: path, Line: lineOf(doc, fe.Field), Field: fe.Field, Problem: fe.ErrorBody()})
		}
		return out
	}
	return nil
}

// clearServerFields drops what only an API server may set, so that a
// manifest exported from a cluster (kubectl get -o yaml) works, and its
// old status or UID does not change the static pod's identity.
func clearServerFields(p *corev1.Pod) {
	m := &p.ObjectMeta
	m.UID, m.ResourceVersion, m.Generation = "", "", 0
	m.CreationTimestamp = metav1.Time{}
	m.DeletionTimestamp, m.DeletionGracePeriodSeconds = nil, nil
	m.ManagedFields, m.OwnerReferences, m.Finalizers = nil, nil, nil
	m.GenerateName = ""
	p.Status = corev1.PodStatus{}
	// The agent's own bookkeeping is recomputed; a copied mirror pod's
	// annotations must not make it a different pod.
	for _, k := range []string{api.AnnotationConfigHash, api.AnnotationConfigSource, api.AnnotationMirrorPod} {
		delete(m.Annotations, k)
	}
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
	p.Spec.NodeName = ""
}

// podUID is the static pod's UID: a hash of the node, the file and the
// pod as decoded (before defaulting, so that an agent upgrade that adds a
// default does not restart every static pod). The same manifest gives the
// same UID across restarts, which lets the kubelet adopt its containers.
func podUID(node, path string, p *corev1.Pod) (types.UID, error) {
	content, err := json.Marshal(p) // encoding/json sorts map keys: canonical
	if err != nil {
		return "", fmt.Errorf("encode pod for hashing: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "node:%s\x00file:%s\x00", node, path)
	h.Write(content)
	return types.UID(hex.EncodeToString(h.Sum(nil))[:32]), nil
}

// apiReferences forbids references to hub objects: a static pod must run
// with no hub at all, and the hub refuses mirror pods that have them.
func apiReferences(p *corev1.Pod) field.ErrorList {
	const why = "a static pod cannot reference hub objects, since it must run without the hub; use a hostPath volume or inline values"
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if p.Spec.ServiceAccountName != "" {
		errs = append(errs, field.Forbidden(spec.Child("serviceAccountName"), why))
	} else if p.Spec.DeprecatedServiceAccount != "" {
		errs = append(errs, field.Forbidden(spec.Child("serviceAccount"), why))
	}
	for i := range p.Spec.ImagePullSecrets {
		errs = append(errs, field.Forbidden(spec.Child("imagePullSecrets").Index(i), why))
	}
	for i, v := range p.Spec.Volumes {
		vp := spec.Child("volumes").Index(i)
		switch {
		case v.Secret != nil:
			errs = append(errs, field.Forbidden(vp.Child("secret"), why))
		case v.ConfigMap != nil:
			errs = append(errs, field.Forbidden(vp.Child("configMap"), why))
		case v.Projected != nil:
			for j, src := range v.Projected.Sources {
				sp := vp.Child("projected", "sources").Index(j)
				switch {
				case src.Secret != nil:
					errs = append(errs, field.Forbidden(sp.Child("secret"), why))
				case src.ConfigMap != nil:
					errs = append(errs, field.Forbidden(sp.Child("configMap"), why))
				case src.ServiceAccountToken != nil:
					errs = append(errs, field.Forbidden(sp.Child("serviceAccountToken"), why))
				}
			}
		}
	}
	errs = append(errs, containerReferences(p.Spec.InitContainers, spec.Child("initContainers"), why)...)
	return append(errs, containerReferences(p.Spec.Containers, spec.Child("containers"), why)...)
}

func containerReferences(cs []corev1.Container, path *field.Path, why string) field.ErrorList {
	var errs field.ErrorList
	for i, c := range cs {
		cp := path.Index(i)
		for j, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			ep := cp.Child("env").Index(j).Child("valueFrom")
			if e.ValueFrom.SecretKeyRef != nil {
				errs = append(errs, field.Forbidden(ep.Child("secretKeyRef"), why))
			}
			if e.ValueFrom.ConfigMapKeyRef != nil {
				errs = append(errs, field.Forbidden(ep.Child("configMapKeyRef"), why))
			}
		}
		for j, f := range c.EnvFrom {
			fp := cp.Child("envFrom").Index(j)
			if f.SecretRef != nil {
				errs = append(errs, field.Forbidden(fp.Child("secretRef"), why))
			}
			if f.ConfigMapRef != nil {
				errs = append(errs, field.Forbidden(fp.Child("configMapRef"), why))
			}
		}
	}
	return errs
}

// pathSeg is one step of a field path: a key, or a list index (>= 0).
type pathSeg struct {
	key   string
	index int
}

// parseFieldPath splits "spec.containers[0].env[1]" or
// "metadata.labels[app.kubernetes.io/name]" into steps.
func parseFieldPath(p string) []pathSeg {
	var segs []pathSeg
	for p != "" {
		switch p[0] {
		case '.':
			p = p[1:]
		case '[':
			end := strings.IndexByte(p, ']')
			if end < 0 {
				return segs
			}
			inner := p[1:end]
			p = p[end+1:]
			if n, err := strconv.Atoi(inner); err == nil && n >= 0 {
				segs = append(segs, pathSeg{index: n})
			} else {
				segs = append(segs, pathSeg{key: strings.Trim(inner, `"'`), index: -1})
			}
		default:
			end := strings.IndexAny(p, ".[")
			if end < 0 {
				end = len(p)
			}
			segs = append(segs, pathSeg{key: p[:end], index: -1})
			p = p[end:]
		}
	}
	return segs
}

// yamlLineShape is the shape of one line of block-style YAML.
type yamlLineShape struct {
	ok         bool // false for blank and comment lines
	dash       bool // a sequence item starts here
	dashIndent int
	indent     int // column of the text after any "- "
	text       string
}

func shapeOf(line string) yamlLineShape {
	t := strings.TrimLeft(line, " ")
	if t == "" || t[0] == '#' {
		return yamlLineShape{}
	}
	l := yamlLineShape{ok: true, indent: len(line) - len(t), text: t}
	if t == "-" || strings.HasPrefix(t, "- ") {
		rest := strings.TrimLeft(t[1:], " ")
		l.dash, l.dashIndent = true, l.indent
		l.indent += len(t) - len(rest)
		l.text = rest
	}
	return l
}

// lineOf finds the file line of a field path in a block-style YAML
// document, by indentation, falling back to the deepest step found and
// then to the document's first line. It is a hint for a human, so an
// approximation (flow style, odd indentation) is acceptable.
func lineOf(doc document, path string) int {
	lines := make([]yamlLineShape, len(doc.lines))
	for i, l := range doc.lines {
		lines[i] = shapeOf(l)
	}
	lo, hi, best := 0, len(lines), -1
	for _, seg := range parseFieldPath(path) {
		var i, end int
		var ok bool
		if seg.index >= 0 {
			i, end, ok = findItem(lines, lo, hi, seg.index)
			lo = i // the item's first key is on its dash line
		} else {
			i, end, ok = findKey(lines, lo, hi, seg.key)
			lo = i + 1
		}
		if !ok {
			break
		}
		best, hi = i, end
	}
	if best < 0 {
		return doc.line
	}
	return doc.line + best
}

// findKey finds key among the entries of the mapping in lines[lo:hi] and
// returns its line and the end of its value's block.
func findKey(lines []yamlLineShape, lo, hi int, key string) (int, int, bool) {
	level := -1
	for j := lo; j < hi; j++ {
		l := lines[j]
		if !l.ok || l.text == "" {
			continue
		}
		if level < 0 {
			level = l.indent
		}
		if l.indent == level && keyIs(l.text, key) {
			return j, blockEnd(lines, j, hi), true
		}
	}
	return 0, 0, false
}

func keyIs(text, key string) bool {
	for _, k := range []string{key, `"` + key + `"`, `'` + key + `'`} {
		if rest, ok := strings.CutPrefix(text, k); ok && strings.HasPrefix(strings.TrimLeft(rest, " "), ":") {
			return true
		}
	}
	return false
}

// blockEnd is the first line after j that is not part of the value of the
// key on line j. A sequence may sit at its key's own indentation.
func blockEnd(lines []yamlLineShape, j, hi int) int {
	n := lines[j].indent
	for k := j + 1; k < hi; k++ {
		l := lines[k]
		if !l.ok {
			continue
		}
		lead := l.indent
		if l.dash {
			if l.dashIndent == n {
				continue
			}
			lead = l.dashIndent
		}
		if lead <= n {
			return k
		}
	}
	return hi
}

// findItem finds item idx of the sequence in lines[lo:hi].
func findItem(lines []yamlLineShape, lo, hi, idx int) (int, int, bool) {
	level, n, start := -1, -1, -1
	for k := lo; k < hi; k++ {
		l := lines[k]
		if !l.ok {
			continue
		}
		if level < 0 {
			if !l.dash {
				return 0, 0, false
			}
			level = l.dashIndent
		}
		if l.dash && l.dashIndent == level {
			n++
			if n == idx {
				start = k
			} else if n == idx+1 {
				return start, k, true
			}
		}
	}
	if start < 0 {
		return 0, 0, false
	}
	return start, hi, true
}
