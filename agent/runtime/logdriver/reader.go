package logdriver

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// ErrBadLine is returned for a line not in the CRI log format.
var ErrBadLine = errors.New("not a CRI log line")

// Entry is one parsed log line.
type Entry struct {
	Time    time.Time
	Stream  string
	Partial bool
	Content []byte
}

// ParseLine parses one line (without its newline).
func ParseLine(line []byte) (Entry, error) {
	parts := bytes.SplitN(line, []byte{' '}, 4)
	if len(parts) < 3 {
		return Entry{}, fmt.Errorf("%w: %q", ErrBadLine, line)
	}
	t, err := time.Parse(TimeFormat, string(parts[0]))
	if err != nil {
		return Entry{}, fmt.Errorf("%w: timestamp: %v", ErrBadLine, err)
	}
	e := Entry{Time: t, Stream: string(parts[1])}
	if e.Stream != "stdout" && e.Stream != "stderr" {
		return Entry{}, fmt.Errorf("%w: stream %q", ErrBadLine, parts[1])
	}
	switch string(parts[2]) {
	case "P":
		e.Partial = true
	case "F":
	default:
		return Entry{}, fmt.Errorf("%w: tag %q", ErrBadLine, parts[2])
	}
	if len(parts) == 4 {
		e.Content = parts[3]
	}
	return e, nil
}
