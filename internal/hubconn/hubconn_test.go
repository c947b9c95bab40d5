package hubconn

import (
	"context"
	"net"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api/agentapi"
)

func TestParseURLs(t *testing.T) {
	got, err := ParseURLs(" https://a:6443, https://b.example/ ,")
	if err != nil || strings.Join(got, " ") != "https://a:6443 https://b.example" {
		t.Fatalf("ParseURLs = %q, %v", got, err)
	}
	for _, bad := range []string{"http://a:6443", "a:6443", "https://a:6443/api", "https://"} {
		if _, err := ParseURLs(bad); err == nil || !strings.Contains(err.Error(), "want https://HOST[:PORT]") {
			t.Errorf("ParseURLs(%q) = %v", bad, err)
		}
	}
}

// The dialer goes to the hub that answers, stays with it, and names every
// hub when none does.
func TestDialerFailsOver(t *testing.T) {
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return ln
	}
	a, b := listen(), listen()
	defer b.Close()
	d, err := NewDialer([]string{"https://" + a.Addr().String(), "https://" + b.Addr().String()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := d.DialContext(ctx, "tcp", "ignored:1")
	if err != nil || c.RemoteAddr().String() != a.Addr().String() {
		t.Fatalf("first dial reached %v, %v; want hub a", c, err)
	}
	c.Close()
	a.Close()
	for range 2 {
		c, err = d.DialContext(ctx, "tcp", "ignored:1")
		if err != nil || c.RemoteAddr().String() != b.Addr().String() {
			t.Fatalf("with hub a gone: %v, %v; want hub b", c, err)
		}
		c.Close()
	}
	if d.Current() != b.Addr().String() {
		t.Fatalf("current hub %s, want b", d.Current())
	}
	b.Close()
	if _, err := d.DialContext(ctx, "tcp", "ignored:1"); err == nil || !strings.Contains(err.Error(), a.Addr().String()) || !strings.Contains(err.Error(), b.Addr().String()) {
		t.Fatalf("no hub up: %v", err)
	}
}

func TestApply(t *testing.T) {
	c := &rest.Config{Host: "https://old:6443"}
	if d, err := Apply(c, []string{"https://a:6443"}, nil); err != nil || d != nil || c.Host != "https://a:6443" || c.Dial != nil || c.TLSClientConfig.ServerName != "" {
		t.Fatalf("one URL: %+v %v %v", c, d, err)
	}
	d, err := Apply(c, []string{"https://a:6443", "https://b"}, nil)
	if err != nil || d == nil || c.Host != "https://a:6443" || c.Dial == nil || c.TLSClientConfig.ServerName != agentapi.HubServerName {
		t.Fatalf("two URLs: %+v %v %v", c, d, err)
	}
	if d.addrs[1] != "b:443" {
		t.Fatalf("a URL without a port: %q", d.addrs[1])
	}
}
