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

// Defaults for Options. See doc.go for why these.
const (
	DefaultMaxSize      = 100 << 20
	DefaultMaxBackups   = 5
	DefaultMaxLineBytes = 4 << 10
	DefaultRefusalRate  = 10
	DefaultRefusalBurst = 100
	DefaultMinHistory   = time.Hour
	DefaultSyncInterval = time.Second
	// flushDelay bounds how long an entry may sit in the buffer: entries
	// are batched under load, and in the file within this delay when idle.
	flushDelay = 200 * time.Millisecond
)

// Options configure Open. Zero values mean the defaults.
type Options struct {
	// MaxSize is the size in bytes past which the file is rotated.
	MaxSize int64
	// MaxBackups is how many rotated files are kept (audit.log.1 newest).
	MaxBackups int
	// MaxLineBytes bounds one entry's line, newline included. Each field
	// has its own cap first (fieldCaps); an entry still longer has its
	// fields cut further. Truncated entries say so ("truncated": true).
	MaxLineBytes int
	// RefusalRate and RefusalBurst bound how many refusals (401, 403, 429)
	// are written: per authenticated user, and for all unauthenticated
	// clients together, a token bucket of RefusalBurst refilled at
	// RefusalRate per second. Refusals over it are counted, and the count
	// is written as one entry ("dropped") when that client's refusals are
	// written again. Negative RefusalRate: no limit.
	RefusalRate  float64
	RefusalBurst int
	// MinHistory: a refusal never makes the log rotate away a file holding
	// entries younger than this; it is counted as dropped instead (the
	// file grows past MaxSize only with other entries). Negative: no guard.
	MinHistory time.Duration
	// SyncInterval bounds how long a written entry waits for fsync.
	// Rotation and Close always fsync.
	SyncInterval time.Duration
	Logger       *slog.Logger
	// Now is the clock of the refusal budget and of MinHistory; time.Now
	// when nil.
	Now func() time.Time
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
	// A streaming session's (pods/exec, attach, portforward): an entry
	// when it starts (SessionStarted, code 0) and one when it ends
	// (SessionEnded, with the answer's code: 101 once upgraded).
	Stage     string   `json:"stage,omitempty"`
	Container string   `json:"container,omitempty"`
	Command   []string `json:"command,omitempty"`
	Node      string   `json:"node,omitempty"`
	// Truncated: a field was cut to keep the line within MaxLineBytes.
	Truncated bool `json:"truncated,omitempty"`
	// Dropped is set on the entry (Verb VerbDropped) that counts the
	// refusals of User not written since DroppedSince.
	Dropped      int64      `json:"dropped,omitempty"`
	DroppedSince *time.Time `json:"droppedSince,omitempty"`
}

// Anonymous is the user recorded for unauthenticated requests.
const Anonymous = "system:anonymous"

// VerbDropped is the verb of the entry that counts dropped refusals.
const VerbDropped = "dropped"

// Log is an audit log file. It is safe for concurrent use.
type Log struct {
	path string
	opts Options
	log  *slog.Logger
	now  func() time.Time

	mu       sync.Mutex
	f        *os.File
	w        *bufio.Writer
	size     int64
	unsynced bool // written since the last fsync
	lastSync time.Time
	closed   bool
	failed   bool // the last write failed (logged once until it works again)
	// budgets of refusals, by user (Anonymous for all unauthenticated).
	budgets map[string]*budget
	// protectedUntil caches the MinHistory guard: until then, rotating
	// would drop a file with entries younger than MinHistory.
	protectedUntil time.Time

	stop chan struct{}
	done chan struct{}
}

var _ apiserver.Auditor = (*Log)(nil)

// syncFile is (*os.File).Sync; tests count the calls.
var syncFile = (*os.File).Sync

// Open opens (appending) or creates the log at path, mode 0600: it names
// who did what, which is itself sensitive.
func Open(path string, opts Options) (*Log, error) {
	if opts.MaxSize <= 0 {
		opts.MaxSize = DefaultMaxSize
	}
	if opts.MaxBackups <= 0 {
		opts.MaxBackups = DefaultMaxBackups
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	opts.MaxLineBytes = max(opts.MaxLineBytes, minLineBytes)
	if opts.RefusalRate == 0 {
		opts.RefusalRate = DefaultRefusalRate
	}
	if opts.RefusalBurst <= 0 {
		opts.RefusalBurst = DefaultRefusalBurst
	}
	if opts.MinHistory == 0 {
		opts.MinHistory = DefaultMinHistory
	}
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = DefaultSyncInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &Log{path: path, opts: opts, log: opts.Logger.With("component", "audit"), now: opts.Now,
		budgets: map[string]*budget{}, lastSync: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	if err := l.open(); err != nil {
		return nil, err
	}
	go l.loop()
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
		Stage: ev.Stage, Container: ev.Container, Command: ev.Command, Node: ev.Node,
	}
	if ev.User != nil {
		e.User, e.Groups = ev.User.Name, ev.User.Groups
	}
	l.Write(e)
}

// IsRefusal says whether an answer's code is a refusal: 401, 403 or 429.
func IsRefusal(code int) bool { return code == 401 || code == 403 || code == 429 }

// Write appends one entry. Failures are logged, not returned: a request
// that already happened cannot be undone because its record failed.
// Refusals are subject to the refusal budget and to MinHistory.
func (l *Log) Write(e Entry) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	key := e.User
	if key == "" {
		key = Anonymous
	}
	refusal := IsRefusal(e.Code)
	line, err := l.encode(e)
	if err != nil {
		l.log.Error("encoding an audit entry", "err", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.log.Warn("audit entry after the log was closed", "entry", string(line))
		return
	}
	if !refusal {
		l.writeLocked(line, false)
		return
	}
	now := l.now()
	b := l.budgetLocked(key, now)
	if !b.take(now, l.opts) {
		b.drop(now, e.SourceIP, dropBudget)
		return
	}
	if b.dropped > 0 && !l.writeSummaryLocked(key, b, now) {
		b.tokens++ // the entry waits with the count: give its token back
		b.drop(now, e.SourceIP, dropHistory)
		return
	}
	if !l.writeLocked(line, true) {
		b.drop(now, e.SourceIP, dropHistory)
	}
}

// writeLocked appends line, rotating first when the file is full. A
// refusal that would rotate away entries younger than MinHistory is not
// written (false).
func (l *Log) writeLocked(line []byte, refusal bool) bool {
	if l.size > 0 && l.size+int64(len(line)) > l.opts.MaxSize {
		if refusal && l.historyAtRiskLocked() {
			return false
		}
		if err := l.rotate(); err != nil {
			l.fail(err)
		}
	}
	n, err := l.w.Write(line)
	l.size += int64(n)
	if n > 0 {
		l.unsynced = true
	}
	if err != nil {
		l.fail(err)
		return true
	}
	l.failed = false
	return true
}

// historyAtRiskLocked says whether rotating now would delete the oldest
// backup while it holds entries younger than MinHistory (its modification
// time is its last entry's).
func (l *Log) historyAtRiskLocked() bool {
	if l.opts.MinHistory < 0 {
		return false
	}
	now := l.now()
	if now.Before(l.protectedUntil) {
		return true
	}
	st, err := os.Stat(l.backup(l.opts.MaxBackups))
	if err != nil {
		return false // no oldest backup yet: rotating drops nothing
	}
	if until := st.ModTime().Add(l.opts.MinHistory); now.Before(until) {
		l.protectedUntil = until
		return true
	}
	return false
}

func (l *Log) fail(err error) {
	if !l.failed {
		l.log.Error("writing the audit log failed; entries may be lost until it works again", "path", l.path, "err", err)
	}
	l.failed = true
}

// loop flushes the buffer within flushDelay, fsyncs within SyncInterval,
// and writes the counts of dropped refusals once their budget allows.
func (l *Log) loop() {
	defer close(l.done)
	t := time.NewTicker(flushDelay)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.tick()
	}
}

func (l *Log) tick() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	now := l.now()
	for user, b := range l.budgets {
		switch {
		case b.dropped > 0:
			if b.take(now, l.opts) && !l.writeSummaryLocked(user, b, now) {
				b.tokens++
			}
		case b.full(now, l.opts):
			delete(l.budgets, user) // idle: forget it
		}
	}
	if l.w.Buffered() > 0 {
		if err := l.w.Flush(); err != nil {
			l.fail(err)
		}
	}
	var f *os.File
	if l.unsynced && time.Since(l.lastSync) >= l.opts.SyncInterval {
		f, l.unsynced, l.lastSync = l.f, false, time.Now()
	}
	l.mu.Unlock()
	// fsync outside the lock: requests must not wait for the disk. A file
	// closed meanwhile was synced by rotate or Close.
	if f != nil {
		if err := syncFile(f); err != nil && !errors.Is(err, os.ErrClosed) {
			l.mu.Lock()
			l.fail(err)
			l.mu.Unlock()
		}
	}
}

// Flush writes buffered entries to the file and syncs it.
func (l *Log) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	return l.syncLocked()
}

func (l *Log) syncLocked() error {
	if err := l.w.Flush(); err != nil {
		return err
	}
	if err := syncFile(l.f); err != nil {
		return err
	}
	l.unsynced, l.lastSync = false, time.Now()
	return nil
}

func (l *Log) backup(i int) string { return fmt.Sprintf("%s.%d", l.path, i) }

// rotate moves audit.log to audit.log.1 (shifting older ones, dropping
// the oldest) and starts a new file. The full file is synced first, so a
// power cut never leaves a rotated file shorter than what was written.
func (l *Log) rotate() error {
	if err := l.syncLocked(); err != nil {
		return err
	}
	if err := l.f.Close(); err != nil {
		return err
	}
	if err := os.Remove(l.backup(l.opts.MaxBackups)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for i := l.opts.MaxBackups - 1; i >= 1; i-- {
		if err := os.Rename(l.backup(i), l.backup(i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(l.path, l.backup(1)); err != nil {
		return err
	}
	l.protectedUntil = time.Time{}
	if err := l.open(); err != nil {
		return err
	}
	syncDir(filepath.Dir(l.path))
	return nil
}

// syncDir makes the renames of a rotation durable.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// Close writes the counts of dropped refusals, flushes, syncs and closes
// the file.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	now := l.now()
	for user, b := range l.budgets {
		if b.dropped > 0 {
			// The last word: written even past the budget and MinHistory.
			l.writeLocked(l.summaryLine(user, b, now), false)
		}
	}
	l.closed = true
	err := l.syncLocked()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.mu.Unlock()
	close(l.stop)
	<-l.done
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
