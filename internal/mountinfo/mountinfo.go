package mountinfo

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Under lists the mount points at or below dir.
func Under(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	prefix := filepath.Clean(dir)
	var out []string
	sc := bufio.NewScanner(f)
	// Lines are short, but a mount with long options must not end the scan.
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := Unescape(fields[4])
		if mp == prefix || strings.HasPrefix(mp, prefix+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

// Unescape undoes mountinfo's octal escapes (\040 for a space).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
