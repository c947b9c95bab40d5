package proxy

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// Cleanup removes every FLOTILLA-* chain from the nat and filter tables
// and every rule of other chains that jumps to one, in one iptables-restore
// transaction: what `flotilla-agent cleanup` runs after the agent is
// stopped. It covers the chains of agent/routes too. Running it when there
// is nothing to remove is fine.
func Cleanup(ctx context.Context) error {
	ipt, err := System("")
	if err != nil {
		return err
	}
	return CleanupWith(ctx, ipt)
}

// CleanupWith is Cleanup with a given IPTables.
func CleanupWith(ctx context.Context, ipt IPTables) error {
	saved, err := ipt.Save(ctx, tableNAT, tableFilter)
	if err != nil {
		return err
	}
	tables, err := parseSave(saved)
	if err != nil {
		return fmt.Errorf("proxy cleanup: %w", err)
	}
	data := cleanupPayload(tables)
	if len(data) == 0 {
		return nil
	}
	if err := ipt.Restore(ctx, data); err != nil {
		return fmt.Errorf("proxy cleanup: %w", err)
	}
	return nil
}

// cleanupPayload deletes the jumps into FLOTILLA chains from the other
// chains (by rule text, which iptables-restore accepts after -D), then
// empties and deletes the FLOTILLA chains.
func cleanupPayload(tables map[string]*savedTable) []byte {
	names := make([]string, 0, len(tables))
	for n := range tables {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		t := tables[name]
		var ours, dels []string
		for _, c := range t.Chains {
			if strings.HasPrefix(c, "FLOTILLA-") {
				ours = append(ours, c)
				continue
			}
			for _, r := range t.Rules[c] {
				if strings.Contains(r, " -j FLOTILLA-") || strings.Contains(r, " -g FLOTILLA-") {
					dels = append(dels, "-D"+strings.TrimPrefix(r, "-A"))
				}
			}
		}
		if len(ours) == 0 && len(dels) == 0 {
			continue
		}
		b.WriteString("*" + name + "\n")
		for _, c := range ours {
			b.WriteString(":" + c + " - [0:0]\n")
		}
		for _, d := range dels {
			b.WriteString(d + "\n")
		}
		for _, c := range ours {
			b.WriteString("-X " + c + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return []byte(b.String())
}
