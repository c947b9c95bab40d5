package term

import (
	"io"
	"os"
)

// Style decorates text; the zero Style leaves it plain.
type Style struct{ Color bool }

// For returns the style for writing to w: colour when w is a terminal and
// NO_COLOR is unset or empty.
func For(w io.Writer, getenv func(string) string) Style {
	return Style{Color: IsTerminal(w) && getenv("NO_COLOR") == ""}
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (s Style) wrap(code, text string) string {
	if !s.Color || text == "" {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}

func (s Style) Bold(t string) string   { return s.wrap("1", t) }
func (s Style) Dim(t string) string    { return s.wrap("2", t) }
func (s Style) Red(t string) string    { return s.wrap("31", t) }
func (s Style) Green(t string) string  { return s.wrap("32", t) }
func (s Style) Yellow(t string) string { return s.wrap("33", t) }

// ClearScreen moves to the top of a cleared terminal; without colour (not
// a terminal) it separates frames with a blank line instead.
func (s Style) ClearScreen() string {
	if !s.Color {
		return "\n"
	}
	return "\x1b[H\x1b[2J"
}
