package envvars

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Expand replaces $(NAME) with vars[NAME] the way Kubernetes does: an
// undefined name is left as written, "$$" is a literal "$" (so "$$(X)"
// gives "$(X)"), and a "$" followed by anything else stays.
func Expand(in string, vars map[string]string) string {
	if !strings.Contains(in, "$") {
		return in
	}
	var b strings.Builder
	checkpoint := 0
	for cursor := 0; cursor < len(in); cursor++ {
		if in[cursor] != '$' || cursor+1 >= len(in) {
			continue
		}
		b.WriteString(in[checkpoint:cursor])
		read, isVar, advance := readName(in[cursor+1:])
		if isVar {
			if v, ok := vars[read]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + read + ")")
			}
		} else {
			b.WriteString(read)
		}
		cursor += advance
		checkpoint = cursor + 1
	}
	b.WriteString(in[checkpoint:])
	return b.String()
}

// readName reads what follows a '$': the name in "(NAME)", an escaped
// '$', or an ordinary character kept with its '$'.
func readName(in string) (read string, isVar bool, advance int) {
	switch in[0] {
	case '$':
		return "$", false, 1
	case '(':
		for i := 1; i < len(in); i++ {
			if in[i] == ')' {
				return in[1:i], true, i + 1
			}
		}
		return "$(", false, 1
	}
	return "$" + in[:1], false, 1
}

// Argv is the process's argv as Kubernetes defines it over the image's
// config: command replaces the entrypoint and drops the image's cmd; args
// alone replace only the cmd; neither keeps both. $(VAR) in command and
// args is expanded from the container's environment.
func Argv(c *corev1.Container, entrypoint, cmd []string, env map[string]string) []string {
	var argv []string
	switch {
	case len(c.Command) > 0:
		argv = append(expandAll(c.Command, env), expandAll(c.Args, env)...)
	case len(c.Args) > 0:
		argv = append(append([]string{}, entrypoint...), expandAll(c.Args, env)...)
	default:
		argv = append(append([]string{}, entrypoint...), cmd...)
	}
	return argv
}

func expandAll(in []string, env map[string]string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = Expand(s, env)
	}
	return out
}
