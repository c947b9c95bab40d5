package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
)

// chainHash identifies a chain's content; the proxy remembers what it
// wrote as hashes rather than text, which keeps memory small at thousands
// of services.
func chainHash(rules []string) uint64 {
	h := fnv.New64a()
	for _, r := range rules {
		h.Write([]byte(r))
		h.Write([]byte{'\n'})
	}
	return h.Sum64()
}

// written is what the kernel holds, as far as the proxy knows: the hash of
// every owned chain's content.
type written map[chainKey]uint64

// plan is one transaction: chains to (re)write and chains to delete.
type plan struct {
	Write  []chainKey
	Delete []chainKey
}

func (p plan) empty() bool { return len(p.Write) == 0 && len(p.Delete) == 0 }

// diff plans the transaction that turns have into want.
func diff(want ruleSet, have written) plan {
	var p plan
	for _, k := range want.keys() {
		if h, ok := have[k]; !ok || h != chainHash(want[k]) {
			p.Write = append(p.Write, k)
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			p.Delete = append(p.Delete, k)
		}
	}
	sortKeys(p.Delete)
	return p
}

func sortKeys(ks []chainKey) {
	sort.Slice(ks, func(i, j int) bool { return lessKey(ks[i], ks[j]) })
}

func lessKey(a, b chainKey) bool {
	if a.Table != b.Table {
		return a.Table < b.Table
	}
	return a.Chain < b.Chain
}

// payload renders p for `iptables-restore --noflush`: declaring a chain
// creates it or flushes it, so a rewritten chain gets exactly its rules; a
// chain to delete is declared (emptied) first and deleted after every rule
// that could refer to it has been replaced, all in one commit per table.
func (p plan) payload(want ruleSet) []byte {
	var b bytes.Buffer
	for _, t := range []string{tableFilter, tableNAT} {
		var decl, rules, del []string
		for _, k := range p.Write {
			if k.Table != t {
				continue
			}
			decl = append(decl, ":"+k.Chain+" - [0:0]")
			rules = append(rules, want[k]...)
		}
		for _, k := range p.Delete {
			if k.Table != t {
				continue
			}
			decl = append(decl, ":"+k.Chain+" - [0:0]")
			del = append(del, "-X "+k.Chain)
		}
		if len(decl) == 0 {
			continue
		}
		b.WriteString("*" + t + "\n")
		for _, group := range [][]string{decl, rules, del} {
			for _, l := range group {
				b.WriteString(l)
				b.WriteByte('\n')
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.Bytes()
}

// savedTable is one table of iptables-save output: chains in order of
// declaration and their rules.
type savedTable struct {
	Chains []string
	Rules  map[string][]string
}

// parseSave reads iptables-save output (one or more tables).
func parseSave(data []byte) (map[string]*savedTable, error) {
	out := map[string]*savedTable{}
	var cur *savedTable
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		l := sc.Text()
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "*"):
			cur = &savedTable{Rules: map[string][]string{}}
			out[l[1:]] = cur
		case l == "COMMIT":
			cur = nil
		case cur == nil:
			return nil, fmt.Errorf("iptables-save output line %d: %q outside a table", line, l)
		case strings.HasPrefix(l, ":"):
			name, _, _ := strings.Cut(l[1:], " ")
			cur.Chains = append(cur.Chains, name)
			if _, ok := cur.Rules[name]; !ok {
				cur.Rules[name] = []string{}
			}
		case strings.HasPrefix(l, "-A "):
			name, _, _ := strings.Cut(l[3:], " ")
			cur.Rules[name] = append(cur.Rules[name], l)
		default:
			return nil, fmt.Errorf("iptables-save output line %d: unexpected %q", line, l)
		}
	}
	return out, sc.Err()
}

// writtenFromSave is what the kernel holds of the proxy's chains.
func writtenFromSave(tables map[string]*savedTable) written {
	w := written{}
	for name, t := range tables {
		for _, c := range t.Chains {
			if ownedChain(name, c) {
				w[chainKey{name, c}] = chainHash(t.Rules[c])
			}
		}
	}
	return w
}
