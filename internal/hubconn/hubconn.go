package hubconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api/agentapi"
)

// DialTimeout bounds one attempt to reach one hub.
const DialTimeout = 5 * time.Second

// ParseURLs splits a --hub value ("https://a:6443,https://b:6443") into
// the hubs' URLs, checking each.
func ParseURLs(s string) ([]string, error) {
	var out []string
	for _, u := range strings.Split(s, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || p.Scheme != "https" || p.Host == "" || (p.Path != "" && p.Path != "/") {
			return nil, fmt.Errorf("hub URL %q: want https://HOST[:PORT]", u)
		}
		out = append(out, strings.TrimSuffix(u, "/"))
	}
	return out, nil
}

// Dialer connects to the first of several hubs that answers, starting
// with the one that answered last.
type Dialer struct {
	addrs []string
	log   *slog.Logger
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)

	mu  sync.Mutex
	cur int
}

// NewDialer returns a Dialer for the hubs at urls.
func NewDialer(urls []string, log *slog.Logger) (*Dialer, error) {
	if len(urls) == 0 {
		return nil, errors.New("hubconn: no hub URL")
	}
	if log == nil {
		log = slog.Default()
	}
	d := &Dialer{log: log, dial: (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext}
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil || p.Host == "" {
			return nil, fmt.Errorf("hubconn: hub URL %q: want https://HOST[:PORT]", u)
		}
		host := p.Host
		if p.Port() == "" {
			host = net.JoinHostPort(p.Hostname(), "443")
		}
		d.addrs = append(d.addrs, host)
	}
	return d, nil
}

// Current is the address of the hub connections go to first.
func (d *Dialer) Current() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.addrs[d.cur]
}

// DialContext connects to a hub, whatever address the client asked for:
// every connection made through a config from Apply is to a hub.
func (d *Dialer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	d.mu.Lock()
	start := d.cur
	d.mu.Unlock()
	var errs []error
	for i := range d.addrs {
		n := (start + i) % len(d.addrs)
		c, err := d.dial(ctx, network, d.addrs[n])
		if err == nil {
			d.mu.Lock()
			if d.cur != n {
				d.log.Info("connected to another hub", "hub", d.addrs[n], "was", d.addrs[d.cur])
				d.cur = n
			}
			d.mu.Unlock()
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("no hub answers (%s): %w", strings.Join(d.addrs, ", "), errors.Join(errs...))
}

// Apply makes c reach any of the hubs at urls (the first is its Host):
// connections go through a Dialer, and the hub's certificate is checked
// for agentapi.HubServerName. With one URL, c only gets that Host.
func Apply(c *rest.Config, urls []string, log *slog.Logger) (*Dialer, error) {
	if len(urls) == 0 {
		return nil, nil
	}
	c.Host = urls[0]
	if len(urls) == 1 {
		return nil, nil
	}
	d, err := NewDialer(urls, log)
	if err != nil {
		return nil, err
	}
	c.Dial = d.DialContext
	c.TLSClientConfig.ServerName = agentapi.HubServerName
	return d, nil
}
