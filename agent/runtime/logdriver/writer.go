package logdriver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Defaults for rotation and line splitting.
const (
	DefaultMaxSize  = 10 << 20
	DefaultMaxFiles = 3
	DefaultMaxLine  = 16 << 10
	// TimeFormat is the CRI log timestamp format.
	TimeFormat = time.RFC3339Nano
)

// File is a size-rotated CRI log file, safe for concurrent writers.
// path.1 is the newest rotated file, path.<MaxFiles-1> the oldest kept.
type File struct {
	path     string
	maxSize  int64
	maxFiles int

	mu   sync.Mutex
	f    *os.File
	size int64
	now  func() time.Time
}

// Open opens (appending) or creates the log file.
func Open(path string, maxSize int64, maxFiles int) (*File, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	if maxFiles < 1 {
		maxFiles = DefaultMaxFiles
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	l := &File{path: path, maxSize: maxSize, maxFiles: maxFiles, now: time.Now}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *File) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, st.Size()
	return nil
}

// WriteEntry writes one entry; stream is "stdout" or "stderr".
func (l *File) WriteEntry(stream string, partial bool, line []byte) error {
	tag := "F"
	if partial {
		tag = "P"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	buf := make([]byte, 0, len(line)+64)
	buf = l.now().UTC().AppendFormat(buf, TimeFormat)
	buf = append(buf, ' ')
	buf = append(buf, stream...)
	buf = append(buf, ' ')
	buf = append(buf, tag...)
	buf = append(buf, ' ')
	buf = append(buf, line...)
	buf = append(buf, '\n')
	if l.size > 0 && l.size+int64(len(buf)) > l.maxSize {
		if err := l.rotate(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(buf)
	l.size += int64(n)
	return err
}

func (l *File) rotate() error {
	if err := l.f.Close(); err != nil {
		return err
	}
	if l.maxFiles == 1 {
		if err := os.Truncate(l.path, 0); err != nil {
			return err
		}
		return l.open()
	}
	os.Remove(l.path + "." + strconv.Itoa(l.maxFiles-1))
	for i := l.maxFiles - 2; i >= 1; i-- {
		err := os.Rename(l.path+"."+strconv.Itoa(i), l.path+"."+strconv.Itoa(i+1))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return err
	}
	return l.open()
}

// Close closes the file.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// Copy reads r until EOF and writes its lines as entries of stream. Lines
// longer than maxLine are split into partial entries ("P"), the last
// piece "F".
func Copy(l *File, stream string, r io.Reader, maxLine int) error {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			if werr := l.WriteEntry(stream, false, line[:len(line)-1]); werr != nil {
				return werr
			}
		case errors.Is(err, bufio.ErrBufferFull):
			if werr := l.WriteEntry(stream, true, line); werr != nil {
				return werr
			}
		case errors.Is(err, io.EOF):
			if len(line) > 0 { // a last line without newline is still whole
				return l.WriteEntry(stream, false, line)
			}
			return nil
		default:
			return fmt.Errorf("read %s: %w", stream, err)
		}
	}
}
