// Package iptrules reads iptables rules back as arguments: the benches
// list rules (iptables -S, iptables-save) and delete or restore them one
// by one, and a comment in quotes is one argument.
package iptrules
