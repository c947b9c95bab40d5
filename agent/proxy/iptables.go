package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/coreos/go-iptables/iptables"
)

// IPTables is what the proxy needs of the kernel's packet filter. System
// returns the real one; unit tests use a fake.
type IPTables interface {
	// EnsureChain creates chain in table unless it exists.
	EnsureChain(table, chain string) error
	// EnsureRule inserts rule at the top of chain unless it is there.
	EnsureRule(table, chain string, rule ...string) error
	// Save returns iptables-save output for the tables.
	Save(ctx context.Context, tables ...string) ([]byte, error)
	// Restore applies data with iptables-restore --noflush, atomically
	// per table.
	Restore(ctx context.Context, data []byte) error
}

// Variants of iptables; both have the same command line and output.
const (
	ModeNFT    = "nf_tables"
	ModeLegacy = "legacy"
)

// ErrIPTables wraps failures of the iptables commands.
var ErrIPTables = errors.New("iptables")

// SystemIPTables runs the iptables commands of one variant.
type SystemIPTables struct {
	mode          string
	ipt           *iptables.IPTables
	restore, save string
}

var _ IPTables = (*SystemIPTables)(nil)

// System returns the iptables of this system. mode is ModeNFT or
// ModeLegacy to force a variant; empty uses the variant `iptables`
// belongs to (as `iptables --version` says), because rules written by the
// other variant would be invisible to the system's own tools.
func System(mode string) (*SystemIPTables, error) {
	if mode == "" {
		out, err := exec.Command("iptables", "--version").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("%w: run `iptables --version`: %v (install the iptables package): %s", ErrIPTables, err, bytes.TrimSpace(out))
		}
		mode = ModeLegacy
		if strings.Contains(string(out), "nf_tables") {
			mode = ModeNFT
		}
	}
	var suffix string
	switch mode {
	case ModeNFT:
		suffix = "nft"
	case ModeLegacy:
		suffix = "legacy"
	default:
		return nil, fmt.Errorf("%w: unknown iptables mode %q (want %q or %q)", ErrIPTables, mode, ModeNFT, ModeLegacy)
	}
	s := &SystemIPTables{mode: mode}
	// The variant's own commands where they exist (Debian ships both),
	// else the plain names, which then are that variant.
	pick := func(cmd string) string {
		if p, err := exec.LookPath(cmd + "-" + suffix); err == nil {
			return p
		}
		if p, err := exec.LookPath(strings.Replace(cmd, "iptables", "iptables-"+suffix, 1)); err == nil {
			return p
		}
		return cmd
	}
	var err error
	s.ipt, err = iptables.New(iptables.Path(pick("iptables")), iptables.Timeout(5))
	if err != nil {
		return nil, fmt.Errorf("%w: %v (install the iptables package)", ErrIPTables, err)
	}
	s.restore, s.save = pick("iptables-restore"), pick("iptables-save")
	return s, nil
}

// Mode is ModeNFT or ModeLegacy.
func (s *SystemIPTables) Mode() string { return s.mode }

func (s *SystemIPTables) EnsureChain(table, chain string) error {
	ok, err := s.ipt.ChainExists(table, chain)
	if err != nil {
		return fmt.Errorf("%w: check chain %s in %s: %v", ErrIPTables, chain, table, err)
	}
	if ok {
		return nil
	}
	if err := s.ipt.NewChain(table, chain); err != nil {
		return fmt.Errorf("%w: create chain %s in %s: %v", ErrIPTables, chain, table, err)
	}
	return nil
}

func (s *SystemIPTables) EnsureRule(table, chain string, rule ...string) error {
	if err := s.ipt.InsertUnique(table, chain, 1, rule...); err != nil {
		return fmt.Errorf("%w: insert %q into %s/%s: %v", ErrIPTables, strings.Join(rule, " "), table, chain, err)
	}
	return nil
}

// DeleteRule removes rule from chain if it is there.
func (s *SystemIPTables) DeleteRule(table, chain string, rule ...string) error {
	if err := s.ipt.DeleteIfExists(table, chain, rule...); err != nil {
		return fmt.Errorf("%w: delete %q from %s/%s: %v", ErrIPTables, strings.Join(rule, " "), table, chain, err)
	}
	return nil
}

func (s *SystemIPTables) Save(ctx context.Context, tables ...string) ([]byte, error) {
	var out bytes.Buffer
	for _, t := range tables {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, s.save, "-t", t)
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%w: %s -t %s: %v: %s", ErrIPTables, s.save, t, err, bytes.TrimSpace(stderr.Bytes()))
		}
	}
	return out.Bytes(), nil
}

func (s *SystemIPTables) Restore(ctx context.Context, data []byte) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, s.restore, "--noflush", "--wait")
	cmd.Stdin, cmd.Stderr = bytes.NewReader(data), &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s --noflush: %v: %s", ErrIPTables, s.restore, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}
