package audit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"flotilla.dev/flotilla/hub/apiserver"
)

// FileName is the audit log's name inside the hub's data dir.
const FileName = "audit.log"

// Defaults for Options.
const (
	DefaultMaxSize    = 100 << 20
	DefaultMaxBackups = 5
	// flushDelay bounds how long an entry may sit in the buffer: entries
	// are batched under load, and on disk within this delay when idle.
	flushDelay = 200 * time.Millisecond
)

// Options configure Open.
type Options struct {
	// MaxSize is the size in bytes past which the file is rotated.
	MaxSize int64
	// MaxBackups is how many rotated files are kept (audit.log.1 newest).
	MaxBackups int
	Logger     *slog.Logger
}

// Entry is one line of the audit log.
type Entry struct {
	Time        time.Time `json:"time"`
	User        string    `json:"user"`
	Groups      []string  `json:"groups,omitempty"`
	SourceIP    string    `json:"sourceIP,omitempty"`
	UserAgent   string    `json:"userAgent,omitempty"`
	Verb        string    `json:"verb"`
	APIGroup    string    `json:"apiGroup,omitempty"`
	Resource    string    `json:"resource,omitempty"`
	Subresource string    `json:"subresource,omitempty"`
	Namespace   string    `json:"namespace,omitempty"`
	Name        string    `json:"name,omitempty"`
	Path        string    `json:"path,omitempty"`
	Code        int       `json:"code"`
	Reason      string    `json:"reason,omitempty"`
}

// Anonymous is the user recorded for unauthenticated requests.
const Anonymous = "system:anonymous"

// Log is an audit log file. It is safe for concurrent use.
type Log struct {
	path string
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	f       *os.File
	w       *bufio.Writer
	size    int64
	pending bool // a flush is scheduled
	closed  bool
	failed  bool // the last write failed (logged once until it works again)
}

var _ apiserver.Auditor = (*Log)(nil)

// Open opens (appending) or creates the log at path, mode 0600: it names
// who did what, which is itself sensitive.
func Open(path string, opts Options) (*Log, error) {
	if opts.MaxSize <= 0 {
		opts.MaxSize = DefaultMaxSize
	}
	if opts.MaxBackups <= 0 {
		opts.MaxBackups = DefaultMaxBackups
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	l := &Log{path: path, opts: opts, log: opts.Logger.With("component", "audit")}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Log) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit: open %s: %w", l.path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit: stat %s: %w", l.path, err)
	}
	l.f, l.size = f, st.Size()
	l.w = bufio.NewWriterSize(f, 64<<10)
	return nil
}

// Audit implements apiserver.Auditor.
func (l *Log) Audit(ev apiserver.AuditEvent) {
	e := Entry{
		Time: ev.Time, User: Anonymous, SourceIP: ev.SourceIP, UserAgent: ev.UserAgent,
		Verb: ev.Verb, APIGroup: ev.APIGroup, Resource: ev.Resource, Subresource: ev.Subresource,
		Namespace: ev.Namespace, Name: ev.Name, Path: ev.Path, Code: ev.Code, Reason: ev.Reason,
	}
	if ev.User != nil {
		e.User, e.Groups = ev.User.Name, ev.User.Groups
	}
	l.Write(e)
}

// Write appends one entry. Failures are logged, not returned: a request
// that already happened cannot be undone because its record failed.
func (l *Log) Write(e Entry) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	line, err := json.Marshal(e)
	if err != nil {
		l.log.Error("encoding an audit entry", "err", err)
		return
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.log.Warn("audit entry after the log was closed", "entry", string(line))
		return
	}
	if l.size > 0 && l.size+int64(len(line)) > l.opts.MaxSize {
		if err := l.rotate(); err != nil {
			l.fail(err)
		}
	}
	n, err := l.w.Write(line)
	l.size += int64(n)
	if err != nil {
		l.fail(err)
		return
	}
	l.failed = false
	if !l.pending {
		l.pending = true
		time.AfterFunc(flushDelay, l.flushLater)
	}
}

func (l *Log) fail(err error) {
	if !l.failed {
		l.log.Error("writing the audit log failed; entries may be lost until it works again", "path", l.path, "err", err)
	}
	l.failed = true
}

func (l *Log) flushLater() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = false
	if l.closed {
		return
	}
	if err := l.w.Flush(); err != nil {
		l.fail(err)
	}
}

// Flush writes buffered entries to the file.
func (l *Log) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	return l.w.Flush()
}

// rotate moves audit.log to audit.log.1 (shifting older ones, dropping
// the oldest) and starts a new file.
func (l *Log) rotate() error {
	if err := l.w.Flush(); err != nil {
		return err
	}
	if err := l.f.Close(); err != nil {
		return err
	}
	oldest := fmt.Sprintf("%s.%d", l.path, l.opts.MaxBackups)
	if err := os.Remove(oldest); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for i := l.opts.MaxBackups - 1; i >= 1; i-- {
		from := fmt.Sprintf("%s.%d", l.path, i)
		if err := os.Rename(from, fmt.Sprintf("%s.%d", l.path, i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return err
	}
	return l.open()
}

// Close flushes and closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	err := l.w.Flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Path is the log's file.
func (l *Log) Path() string { return l.path }

// ReadFile reads the entries of one audit file, for tests and tools.
func ReadFile(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return out, fmt.Errorf("audit: %s line %d: %w", filepath.Base(path), n, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}
