package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
)

// Conntrack deletes UDP connection-tracking entries.
type Conntrack interface {
	// ClearUDP deletes UDP flows matching every non-empty field of f.
	ClearUDP(ctx context.Context, f FlowFilter) error
}

// FlowFilter selects conntrack entries by their original direction and
// translated destination.
type FlowFilter struct {
	// OrigDst and OrigDstPort are the address the client sent to.
	OrigDst     string
	OrigDstPort int32
	// DstNAT is the endpoint address the flow was translated to.
	DstNAT string
}

// ConntrackCLI runs the conntrack command (Debian's conntrack package).
type ConntrackCLI struct{}

func (ConntrackCLI) ClearUDP(ctx context.Context, f FlowFilter) error {
	args := []string{"-D", "-p", "udp"}
	if f.OrigDst != "" {
		args = append(args, "--orig-dst", f.OrigDst)
	}
	if f.OrigDstPort != 0 {
		args = append(args, "--orig-port-dst", strconv.Itoa(int(f.OrigDstPort)))
	}
	if f.DstNAT != "" {
		args = append(args, "--dst-nat", f.DstNAT)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "conntrack", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	// conntrack exits 1 when nothing matched, which is success here.
	if errors.As(err, &exit) && exit.ExitCode() == 1 && bytes.Contains(out.Bytes(), []byte("0 flow entries")) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("conntrack %v: %w: %s (install the conntrack package)", args, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// staleFlows lists the UDP flows to delete after moving from the old
// service ports to the new: flows to endpoints that are gone, and every
// flow of a service port that had no endpoints (those were rejected, and
// their entries would keep the new endpoints from being used).
func staleFlows(old, cur []*servicePort) []FlowFilter {
	prev := map[string]*servicePort{}
	for _, sp := range old {
		if sp.Protocol == "UDP" {
			prev[sp.String()] = sp
		}
	}
	var out []FlowFilter
	for _, sp := range cur {
		if sp.Protocol != "UDP" {
			continue
		}
		was, ok := prev[sp.String()]
		delete(prev, sp.String())
		if !ok {
			continue
		}
		if len(was.Cluster) == 0 && len(sp.Cluster) > 0 {
			out = append(out, FlowFilter{OrigDst: sp.ClusterIP, OrigDstPort: sp.Port})
			if sp.NodePort != 0 {
				out = append(out, FlowFilter{OrigDstPort: sp.NodePort})
			}
			continue
		}
		for _, e := range was.Cluster {
			if !containsEndpoint(sp.Cluster, e) {
				out = append(out, FlowFilter{OrigDst: was.ClusterIP, OrigDstPort: was.Port, DstNAT: e.IP})
				if was.NodePort != 0 {
					out = append(out, FlowFilter{OrigDstPort: was.NodePort, DstNAT: e.IP})
				}
			}
		}
	}
	// Service ports that are gone altogether.
	for _, was := range prev {
		for _, e := range was.Cluster {
			out = append(out, FlowFilter{OrigDst: was.ClusterIP, OrigDstPort: was.Port, DstNAT: e.IP})
		}
	}
	return out
}
