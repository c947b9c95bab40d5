package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/fnv"
	"slices"
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
	Write  []chainWrite
	Delete []chainKey
}

type chainWrite struct {
	Key   chainKey
	Rules []string
	Sum   uint64
}

func (p plan) empty() bool { return len(p.Write) == 0 && len(p.Delete) == 0 }

// diff plans the transaction that turns have into want. prev, when not
// nil, is the port renderings that have is known to hold (the last
// successful write): a port whose rendering is the very same object is
// skipped without looking at its chains, which keeps a sync after one
// change proportional to the change, not to the number of services.
// With prev nil every chain is compared, and chains in have that nobody
// wants are deleted.
func diff(want rendered, have written, prev map[string]*portRules) plan {
	var p plan
	for _, k := range baseChains {
		if h, ok := have[k]; !ok || h != want.baseSums[k] {
			p.Write = append(p.Write, chainWrite{k, want.base[k], want.baseSums[k]})
		}
	}
	for _, pr := range want.ports {
		if prev != nil && prev[pr.key] == pr {
			continue
		}
		for i, k := range pr.own {
			if h, ok := have[k]; !ok || h != pr.sums[i] {
				p.Write = append(p.Write, chainWrite{k, pr.rules[k], pr.sums[i]})
			}
		}
	}
	if prev != nil {
		cur := make(map[string]*portRules, len(want.ports))
		for _, pr := range want.ports {
			cur[pr.key] = pr
		}
		for key, old := range prev {
			now := cur[key]
			if now == old {
				continue
			}
			for _, k := range old.own {
				if _, ok := have[k]; ok && (now == nil || !slices.Contains(now.own, k)) {
					p.Delete = append(p.Delete, k)
				}
			}
		}
	} else {
		wanted := make(map[chainKey]bool, len(have))
		for _, k := range baseChains {
			wanted[k] = true
		}
		for _, pr := range want.ports {
			for _, k := range pr.own {
				wanted[k] = true
			}
		}
		for k := range have {
			if !wanted[k] {
				p.Delete = append(p.Delete, k)
			}
		}
	}
	sort.Slice(p.Write, func(i, j int) bool { return lessKey(p.Write[i].Key, p.Write[j].Key) })
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
func (p plan) payload() []byte {
	var b bytes.Buffer
	for _, t := range []string{tableFilter, tableNAT} {
		var decl, rules, del []string
		for _, w := range p.Write {
			if w.Key.Table != t {
				continue
			}
			decl = append(decl, ":"+w.Key.Chain+" - [0:0]")
			rules = append(rules, w.Rules...)
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
