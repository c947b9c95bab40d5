package netnstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"flotilla.dev/flotilla/internal/testenv"
)

// NS is a named network namespace (`ip netns`).
type NS struct {
	Name string
	Path string
}

// Skip skips t (fails it under CI) unless it runs as root with the ip
// command and cmds, and skips it with -short: testenv.RequireNetNS.
func Skip(t testing.TB, cmds ...string) {
	t.Helper()
	testenv.RequireNetNS(t, cmds...)
}

// Create makes a namespace named prefix-<random> with loopback up.
func Create(prefix string) (*NS, error) {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := prefix + "-" + hex.EncodeToString(b)
	if err := run("ip", "netns", "add", name); err != nil {
		return nil, err
	}
	n := &NS{Name: name, Path: "/run/netns/" + name}
	if err := n.IP("link", "set", "lo", "up"); err != nil {
		_ = n.Delete()
		return nil, err
	}
	return n, nil
}

// New is Create for a test, deleted when it ends.
func New(t testing.TB, prefix string) *NS {
	t.Helper()
	n, err := Create(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Delete(); err != nil {
			t.Error(err)
		}
	})
	return n
}

// Delete removes the namespace (and the interfaces in it).
func (n *NS) Delete() error { return run("ip", "netns", "del", n.Name) }

// IP runs `ip -n <ns> args...`.
func (n *NS) IP(args ...string) error { return run("ip", append([]string{"-n", n.Name}, args...)...) }

// Exec runs a command inside the namespace and returns its output.
func (n *NS) Exec(ctx context.Context, cmd string, args ...string) ([]byte, error) {
	c := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, cmd}, args...)...)
	var out, stderr bytes.Buffer
	c.Stdout, c.Stderr = &out, &stderr
	if err := c.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s in netns %s: %w: %s", cmd, strings.Join(args, " "), n.Name, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out.Bytes(), nil
}

// Sysctl sets key (e.g. net.ipv4.ip_forward) inside the namespace.
func (n *NS) Sysctl(key, value string) error {
	_, err := n.Exec(context.Background(), "sysctl", "-q", "-w", key+"="+value)
	return err
}

// Do runs fn on a thread inside the namespace: sockets it opens stay
// there, processes it starts inherit it.
func (n *NS) Do(fn func() error) error {
	return ns.WithNetNSPath(n.Path, func(ns.NetNS) error { return fn() })
}

// Listen opens a listener inside the namespace.
func (n *NS) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// ListenPacket opens a packet socket inside the namespace.
func (n *NS) ListenPacket(network, addr string) (net.PacketConn, error) {
	var c net.PacketConn
	err := n.Do(func() error {
		var err error
		c, err = net.ListenPacket(network, addr)
		return err
	})
	return c, err
}

// Dial connects from inside the namespace.
func (n *NS) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var err error
		d := net.Dialer{Timeout: 3 * time.Second}
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Veth connects a (interface aName, address aAddr) to b (bName, bAddr);
// an empty address leaves that end unaddressed (for a bridge port).
func Veth(a *NS, aName, aAddr string, b *NS, bName, bAddr string) error {
	tmp := "vt" + hex.EncodeToString(randBytes(4))
	if err := a.IP("link", "add", aName, "type", "veth", "peer", "name", tmp); err != nil {
		return err
	}
	if err := a.IP("link", "set", tmp, "netns", b.Name); err != nil {
		return err
	}
	if err := b.IP("link", "set", tmp, "name", bName); err != nil {
		return err
	}
	for _, end := range []struct {
		n          *NS
		name, addr string
	}{{a, aName, aAddr}, {b, bName, bAddr}} {
		if end.addr != "" {
			if err := end.n.IP("addr", "add", end.addr, "dev", end.name); err != nil {
				return err
			}
		}
		if err := end.n.IP("link", "set", end.name, "up"); err != nil {
			return err
		}
	}
	return nil
}

// Bridge creates bridge name in n with address addr (may be empty).
func (n *NS) Bridge(name, addr string) error {
	if err := n.IP("link", "add", name, "type", "bridge"); err != nil {
		return err
	}
	if addr != "" {
		if err := n.IP("addr", "add", addr, "dev", name); err != nil {
			return err
		}
	}
	return n.IP("link", "set", name, "up")
}

// Pod makes a namespace attached to bridge br in host: eth0 with addr
// (CIDR form), default route via gw, the host end named hostIf, in
// hairpin mode as Flotilla's CNI config sets it (a pod reaching itself
// through a service comes back out of the port it went in).
func Pod(host *NS, br, hostIf, addr, gw string) (*NS, error) {
	p, err := Create("flt-pod")
	if err != nil {
		return nil, err
	}
	err = errors.Join(
		Veth(p, "eth0", addr, host, hostIf, ""),
		host.IP("link", "set", hostIf, "master", br),
		host.IP("link", "set", hostIf, "type", "bridge_slave", "hairpin", "on"),
		p.IP("route", "add", "default", "via", gw),
	)
	if err != nil {
		_ = p.Delete()
		return nil, err
	}
	return p, nil
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func run(cmd string, args ...string) error {
	out, err := exec.Command(cmd, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", cmd, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
