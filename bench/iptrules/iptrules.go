package iptrules

import "strings"

// Split splits a rule line of `iptables -S` or iptables-save into
// arguments: fields separated by spaces, a double-quoted field (a
// comment) as one argument without its quotes, backslash escapes inside
// quotes honoured.
func Split(line string) []string {
	var (
		out    []string
		cur    strings.Builder
		quoted bool
		inArg  bool
	)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && quoted && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			quoted, inArg = !quoted, true
		case c == ' ' && !quoted:
			if inArg {
				out = append(out, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if inArg {
		out = append(out, cur.String())
	}
	return out
}
