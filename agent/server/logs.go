package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"flotilla.dev/flotilla/agent/runtime/logdriver"
)

// Errors of a log request; the handler maps them to HTTP codes.
var (
	// ErrBadRequest: the request's parameters are wrong (400).
	ErrBadRequest = errors.New("bad request")
	// ErrNotFound: no such pod or container on this node (404).
	ErrNotFound = errors.New("not found")
)

// LogOptions are the containerLogs query parameters, as the kubelet takes
// them.
type LogOptions struct {
	Follow     bool
	Previous   bool
	Timestamps bool
	// TailLines, when >= 0, starts that many lines before the end.
	TailLines int64
	// LimitBytes, when > 0, stops after that many bytes of output.
	LimitBytes int64
	// Since skips lines logged before it.
	Since time.Time
}

// LogRef names one container attempt's log.
type LogRef struct {
	Namespace, Pod, UID, Container string
	Attempt                        uint32
	// Path is the current file; rotated ones are Path.1 (newest) to
	// Path.N (oldest).
	Path string
}

// logFinder locates logs in the runtime's layout:
// LogDir/<namespace>_<pod>_<uid>/<container>/<attempt>.log (see
// agent/runtime's LogPath), rotated as logdriver does.
type logFinder struct {
	dir string
	// podUID, when set, names the pod's current UID (the kubelet knows);
	// otherwise the pod directory with the newest log wins.
	podUID func(namespace, name string) (string, bool)
}

func checkNames(namespace, pod, container string) error {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return fmt.Errorf("%w: namespace %q: %s", ErrBadRequest, namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(pod); len(errs) > 0 {
		return fmt.Errorf("%w: pod name %q: %s", ErrBadRequest, pod, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(container); len(errs) > 0 {
		return fmt.Errorf("%w: container name %q: %s", ErrBadRequest, container, strings.Join(errs, "; "))
	}
	return nil
}

// find returns the log of the container's newest attempt, or with
// previous the one before it.
func (f *logFinder) find(namespace, pod, container string, previous bool) (LogRef, error) {
	if err := checkNames(namespace, pod, container); err != nil {
		return LogRef{}, err
	}
	podDir, uid, err := f.podDir(namespace, pod, container)
	if err != nil {
		return LogRef{}, err
	}
	attempts, err := listAttempts(filepath.Join(podDir, container))
	if err != nil {
		return LogRef{}, err
	}
	ref := LogRef{Namespace: namespace, Pod: pod, UID: uid, Container: container}
	switch {
	case len(attempts) == 0:
		return ref, fmt.Errorf("%w: container %q in pod %q is waiting to start: it has no logs yet", ErrBadRequest, container, pod)
	case previous && len(attempts) < 2:
		return ref, fmt.Errorf("%w: previous terminated container %q in pod %q not found", ErrBadRequest, container, pod)
	case previous:
		ref.Attempt = attempts[len(attempts)-2]
	default:
		ref.Attempt = attempts[len(attempts)-1]
	}
	ref.Path = filepath.Join(podDir, container, strconv.FormatUint(uint64(ref.Attempt), 10)+".log")
	return ref, nil
}

// podDir picks the pod's log directory. Several exist when a pod was
// replaced by one of the same name whose predecessor's logs are not
// removed yet.
func (f *logFinder) podDir(namespace, pod, container string) (string, string, error) {
	prefix := namespace + "_" + pod + "_"
	if f.podUID != nil {
		if uid, ok := f.podUID(namespace, pod); ok {
			d := filepath.Join(f.dir, prefix+uid)
			if _, err := os.Stat(d); err == nil {
				return d, uid, nil
			}
		}
	}
	entries, err := os.ReadDir(f.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("reading the log dir: %w", err)
	}
	best, bestUID := "", ""
	var bestTime time.Time
	for _, e := range entries {
		uid, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() || strings.Contains(uid, "_") {
			continue
		}
		d := filepath.Join(f.dir, e.Name())
		t := newestLog(filepath.Join(d, container))
		if best == "" || t.After(bestTime) {
			best, bestUID, bestTime = d, uid, t
		}
	}
	if best == "" {
		return "", "", fmt.Errorf("%w: pod %s/%s has no logs on this node", ErrNotFound, namespace, pod)
	}
	if _, err := os.Stat(filepath.Join(best, container)); err != nil {
		return "", "", fmt.Errorf("%w: container %q in pod %s/%s has no logs on this node", ErrNotFound, container, namespace, pod)
	}
	return best, bestUID, nil
}

func newestLog(dir string) time.Time {
	var t time.Time
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.ModTime().After(t) {
			t = info.ModTime()
		}
	}
	return t
}

// listAttempts returns the attempts with a current log file, ascending.
func listAttempts(dir string) ([]uint32, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	var out []uint32
	for _, e := range entries {
		n, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok {
			continue
		}
		a, err := strconv.ParseUint(n, 10, 32)
		if err != nil {
			continue
		}
		out = append(out, uint32(a))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// files are the attempt's log files, oldest first.
func (r LogRef) files() []string {
	var rotated []string
	for i := 1; ; i++ {
		p := r.Path + "." + strconv.Itoa(i)
		if _, err := os.Stat(p); err != nil {
			break
		}
		rotated = append(rotated, p)
	}
	out := make([]string, 0, len(rotated)+1)
	for i := len(rotated) - 1; i >= 0; i-- {
		out = append(out, rotated[i])
	}
	return append(out, r.Path)
}

// errLimit ends a copy at LimitBytes.
var errLimit = errors.New("byte limit reached")

// logWriter turns CRI entries into what kubectl shows: the content, a
// newline after the last piece of each line, and with Timestamps the
// entry's time before each line.
type logWriter struct {
	w       io.Writer
	opts    LogOptions
	written int64
	// midLine is true after a partial piece: the next piece continues it.
	midLine bool
	// skipLine drops the rest of a line whose first piece is before Since.
	skipLine bool
	buf      []byte
}

func (lw *logWriter) entry(e logdriver.Entry) error {
	if !lw.midLine {
		lw.skipLine = !lw.opts.Since.IsZero() && e.Time.Before(lw.opts.Since)
	}
	if lw.skipLine {
		lw.midLine = e.Partial
		return nil
	}
	b := lw.buf[:0]
	if lw.opts.Timestamps && !lw.midLine {
		b = e.Time.AppendFormat(b, time.RFC3339Nano)
		b = append(b, ' ')
	}
	b = append(b, e.Content...)
	if !e.Partial {
		b = append(b, '\n')
	}
	lw.midLine = e.Partial
	lw.buf = b
	if lw.opts.LimitBytes > 0 {
		left := lw.opts.LimitBytes - lw.written
		if int64(len(b)) >= left {
			n, err := lw.w.Write(b[:left])
			lw.written += int64(n)
			if err != nil {
				return err
			}
			return errLimit
		}
	}
	n, err := lw.w.Write(b)
	lw.written += int64(n)
	return err
}

// copyLines writes the whole lines of r (from its current position) and
// returns how many bytes it consumed; an unterminated last line is left
// for the next call (it is being written).
func (lw *logWriter) copyLines(r io.Reader) (int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var consumed int64
	var long []byte
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, line...)
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return consumed, nil
			}
			return consumed, err
		}
		if long != nil {
			line = append(long, line...)
			long = nil
		}
		consumed += int64(len(line))
		e, perr := logdriver.ParseLine(bytes.TrimSuffix(line, []byte{'\n'}))
		if perr != nil {
			continue // not written by the logger; nothing to show
		}
		if err := lw.entry(e); err != nil {
			return consumed, err
		}
	}
}

// tailStart finds where the last n lines of the attempt's files begin:
// the index of the file and the offset in it. A line is counted at its
// last piece ("F"), so a long line split into pieces counts once.
func tailStart(files []string, n int64) (int, int64, error) {
	last := len(files) - 1
	if n == 0 {
		st, err := os.Stat(files[last])
		if err != nil {
			return last, 0, nil
		}
		return last, st.Size(), nil
	}
	for i := last; i >= 0; i-- {
		off, found, err := tailOffset(files[i], n)
		if err != nil {
			return 0, 0, err
		}
		if found >= n || i == 0 {
			if off == 0 && i > 0 {
				// The first line may have begun in the older file.
				if poff, _, err := tailOffset(files[i-1], 0); err == nil {
					if st, err := os.Stat(files[i-1]); err == nil && poff < st.Size() {
						return i - 1, poff, nil
					}
				}
			}
			return i, off, nil
		}
		n -= found
	}
	return 0, 0, nil
}

// tailOffset scans path backwards for the start of its last n whole
// lines, with the partial pieces before the first of them; found is how
// many it has when fewer (then the offset is 0). With n == 0 it finds the
// start of the partial pieces the file ends with.
func tailOffset(path string, n int64) (int64, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, 0, nil // rotated away meanwhile
		}
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	const chunk = 32 << 10
	buf := make([]byte, chunk)
	hdr := make([]byte, 64)
	end := st.Size()
	var found int64
	// lineEnd is the offset just past the newline that ends the line
	// being looked at; the unterminated tail of the file is no line.
	lineEnd := int64(-1)
	for pos := end; pos > 0; {
		start := pos - chunk
		if start < 0 {
			start = 0
		}
		b := buf[:pos-start]
		if _, err := f.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != '\n' {
				continue
			}
			nl := start + int64(i) + 1 // a line starts here
			if lineEnd >= 0 {
				if full, err := isFullLine(f, hdr, nl); err != nil {
					return 0, 0, err
				} else if full {
					if found == n {
						// One line too many: the tail starts after it.
						return lineEnd, found, nil
					}
					found++
				}
			}
			lineEnd = nl
		}
		pos = start
	}
	if lineEnd >= 0 {
		if full, err := isFullLine(f, hdr, 0); err != nil {
			return 0, 0, err
		} else if full {
			if found == n {
				return lineEnd, found, nil
			}
			found++
		}
	}
	return 0, found, nil
}

// isFullLine reads the entry header at off: true unless it is a partial
// piece ("P"). Headers it cannot parse count as lines.
func isFullLine(f *os.File, hdr []byte, off int64) (bool, error) {
	n, err := f.ReadAt(hdr, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	parts := bytes.SplitN(hdr[:n], []byte{' '}, 4)
	return !(len(parts) >= 3 && string(parts[2]) == "P"), nil
}

// readLogs writes the attempt's log per opts. With Follow it keeps
// reading as the file grows and rotates, until ctx ends, the limit is
// reached, or done says the attempt will write no more.
func readLogs(ctx context.Context, w io.Writer, ref LogRef, opts LogOptions, follow *follower) error {
	lw := &logWriter{w: w, opts: opts}
	// The file being written is opened first: the writer may rotate while
	// the older files are read, and a follow must go on from this file,
	// not from whatever has its name by then.
	cur, err := openCurrent(ctx, ref.Path)
	if err != nil {
		return err
	}
	defer func() { cur.Close() }()
	cst, err := cur.Stat()
	if err != nil {
		return err
	}
	files := ref.files()
	last := len(files) - 1
	for i, p := range files {
		if st, err := os.Stat(p); err == nil && os.SameFile(st, cst) {
			// Rotated already: newer files are read by the follow.
			last = i
			break
		}
	}
	files = files[:last+1]
	first, off := 0, int64(0)
	if opts.TailLines >= 0 {
		if first, off, err = tailStart(files, opts.TailLines); err != nil {
			return err
		}
	}
	for i := first; i < last; i++ {
		f, err := os.Open(files[i])
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return err
		}
		start := int64(0)
		if i == first {
			start = off
		}
		_, err = lw.copyLines(io.NewSectionReader(f, start, 1<<62))
		f.Close()
		if err != nil {
			return ignoreLimit(err)
		}
	}
	pos := int64(0)
	if first == last {
		pos = off
	}
	n, err := lw.copyLines(io.NewSectionReader(cur, pos, 1<<62))
	if err != nil {
		return ignoreLimit(err)
	}
	pos += n
	if !opts.Follow || follow == nil {
		return nil
	}
	return ignoreLimit(follow.follow(ctx, lw, ref, &cur, pos))
}

func ignoreLimit(err error) error {
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}

// openCurrent opens the log file at path, waiting out the instant of a
// rotation in which it does not exist.
func openCurrent(ctx context.Context, path string) (*os.File, error) {
	for i := 0; ; i++ {
		f, err := os.Open(path)
		if err == nil || !errors.Is(err, os.ErrNotExist) || i == 50 {
			return f, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// follower follows a growing log file by polling: rotation is a rename
// and a new file, which polling sees as a different inode at the path, and
// polling needs no watcher per file in a process that aims to stay small.
type follower struct {
	poll time.Duration
	// running, when set, says whether the attempt may still write; checked
	// when the file has been idle for a while. Without it a follow ends
	// when a newer attempt starts or the client leaves.
	running func(ctx context.Context, ref LogRef) (bool, error)
	// idleChecks is how many idle polls pass between running checks.
	idleChecks int
	flush      func()
}

func (fl *follower) follow(ctx context.Context, lw *logWriter, ref LogRef, curp **os.File, pos int64) error {
	cur := *curp
	idle := 0
	t := time.NewTicker(fl.poll)
	defer t.Stop()
	for {
		if fl.flush != nil {
			fl.flush()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		st, err := cur.Stat()
		if err != nil {
			return err
		}
		if st.Size() < pos { // truncated in place (a single kept file)
			pos = 0
		}
		if st.Size() > pos {
			n, err := lw.copyLines(io.NewSectionReader(cur, pos, 1<<62))
			pos += n
			if err != nil {
				return err
			}
			if n > 0 {
				idle = 0
				continue
			}
		}
		// Rotated: the old file is complete, so finish it and move on.
		if pst, err := os.Stat(ref.Path); err == nil && !os.SameFile(st, pst) {
			if _, err := lw.copyLines(io.NewSectionReader(cur, pos, 1<<62)); err != nil {
				return err
			}
			// Open the new file first, then the files rotated between ours
			// and it (several rotations can happen between two polls):
			// what is open can be renamed again without being lost.
			nf, err := os.Open(ref.Path)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue
				}
				return err
			}
			between, err := rotatedBetween(ref.Path, st, nf)
			if err != nil {
				nf.Close()
				return err
			}
			for _, f := range between {
				_, err := lw.copyLines(f)
				f.Close()
				if err != nil {
					nf.Close()
					return err
				}
			}
			cur.Close()
			cur, pos, idle = nf, 0, 0
			*curp = cur
			continue
		}
		idle++
		if idle%fl.idleChecks != 0 {
			continue
		}
		if fl.done(ctx, ref) {
			// Whatever was written before it ended.
			_, err := lw.copyLines(io.NewSectionReader(cur, pos, 1<<62))
			return err
		}
	}
}

// rotatedBetween opens, oldest first, the rotated files of path that are
// newer than ours and older than next (all of them when ours is gone). The
// writer may rotate while they are listed, shifting every name by one; a
// listing is used only when every file opened is the one that was listed.
func rotatedBetween(path string, ours os.FileInfo, next *os.File) ([]*os.File, error) {
	nst, err := next.Stat()
	if err != nil {
		return nil, err
	}
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	for attempt := 0; attempt < 10; attempt++ {
		var files []*os.File // newest first
		stable := true
		for i := 1; ; i++ {
			p := path + "." + strconv.Itoa(i)
			f, err := os.Open(p)
			if err != nil {
				break
			}
			st, err := f.Stat()
			if err != nil {
				f.Close()
				stable = false
				break
			}
			if os.SameFile(st, ours) {
				f.Close()
				break
			}
			if os.SameFile(st, nst) {
				// next was rotated already: only older files count.
				f.Close()
				closeAll(files)
				files = nil
				continue
			}
			if lst, err := os.Stat(p); err != nil || !os.SameFile(lst, st) {
				// Renamed while we opened it: list again.
				f.Close()
				stable = false
				break
			}
			files = append(files, f)
		}
		if stable {
			slices.Reverse(files)
			return files, nil
		}
		closeAll(files)
	}
	return nil, fmt.Errorf("following %s: the log rotated too fast to follow", path)
}

// done says whether the attempt will write no more: a newer attempt has
// started, or the runtime says it is not running.
func (fl *follower) done(ctx context.Context, ref LogRef) bool {
	attempts, err := listAttempts(filepath.Dir(ref.Path))
	if err == nil && len(attempts) > 0 && attempts[len(attempts)-1] > ref.Attempt {
		return true
	}
	if fl.running == nil {
		return false
	}
	running, err := fl.running(ctx, ref)
	return err == nil && !running
}
