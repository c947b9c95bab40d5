// Package term owns how flotctl decorates its output for a person: colour
// only when writing to a terminal, and never when NO_COLOR is set
// (https://no-color.org).
package term
