package logdriver

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
)

// Arguments the runtime passes (as key/value pairs: containerd turns the
// log URI's query into "key value" arguments in no fixed order).
const (
	ArgPath     = "path"
	ArgMaxSize  = "max-size"
	ArgMaxFiles = "max-files"
)

// Main is the logging binary: args are key/value pairs, fds 3 and 4 are
// stdout and stderr, fd 5 is closed to tell the shim it is ready. It
// returns the exit code.
func Main(args []string, diag io.Writer) int {
	opts := map[string]string{}
	if len(args)%2 != 0 {
		fmt.Fprintf(diag, "flotilla-logger: want key/value argument pairs, got %q\n", args)
		return 2
	}
	for i := 0; i < len(args); i += 2 {
		opts[args[i]] = args[i+1]
	}
	path := opts[ArgPath]
	if path == "" {
		fmt.Fprintln(diag, "flotilla-logger: missing the path argument")
		return 2
	}
	maxSize, _ := strconv.ParseInt(opts[ArgMaxSize], 10, 64)
	maxFiles, _ := strconv.Atoi(opts[ArgMaxFiles])

	// The shim sends SIGTERM when the task is deleted; the streams end by
	// themselves, and ending at EOF keeps the last lines.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGPIPE)

	stdout, stderr, ready := os.NewFile(3, "stdout"), os.NewFile(4, "stderr"), os.NewFile(5, "ready")
	l, err := Open(path, maxSize, maxFiles)
	if err != nil {
		fmt.Fprintf(diag, "flotilla-logger: %v\n", err)
		ready.Close()
		// Keep draining so the container never blocks on its output.
		go io.Copy(io.Discard, stderr)
		io.Copy(io.Discard, stdout)
		return 1
	}
	ready.Close()
	var wg sync.WaitGroup
	code := 0
	var mu sync.Mutex
	for _, s := range []struct {
		name string
		f    *os.File
	}{{"stdout", stdout}, {"stderr", stderr}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Copy(l, s.name, s.f, DefaultMaxLine); err != nil {
				fmt.Fprintf(diag, "flotilla-logger: %s: %v\n", path, err)
				io.Copy(io.Discard, s.f)
				mu.Lock()
				code = 1
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		return 1
	}
	return code
}
