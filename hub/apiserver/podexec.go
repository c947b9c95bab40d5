package apiserver

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/proxy"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/agentapi"
)

// AgentConnFunc says how to reach a node's agent: its base URL and a
// transport that presents the hub's client certificate and pins the
// agent's serving certificate. Errors should be StatusErrors.
type AgentConnFunc func(node *corev1.Node) (*url.URL, *http.Transport, error)

// AgentConn is the AgentConnFunc of the hub: the agent at the node's
// address and kubelet port (as for pods/log), the hub's client
// certificate from credentials (read on every call, so a renewed one is
// used), the agent's serving certificate pinned to the Node's
// agentapi.AnnotationServingCertHash. HTTP/1.1 only: the sessions are
// upgrades.
func AgentConn(credentials func() (certPEM, keyPEM []byte)) AgentConnFunc {
	return func(node *corev1.Node) (*url.URL, *http.Transport, error) {
		certPEM, keyPEM := credentials()
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, nil, apierrors.NewInternalError(fmt.Errorf("the hub's client certificate for agents: %w", err))
		}
		hostPort, err := agentHostPort(node)
		if err != nil {
			return nil, nil, err
		}
		pin := node.Annotations[agentapi.AnnotationServingCertHash]
		if pin == "" {
			return nil, nil, apierrors.NewServiceUnavailable(fmt.Sprintf("node %s publishes no serving certificate hash (annotation %s), so the hub cannot check whom it talks to; upgrade its agent", node.Name, agentapi.AnnotationServingCertHash))
		}
		tlsCfg := agentapi.PinnedTLSConfig(pin, &cert)
		tlsCfg.NextProtos = []string{"http/1.1"}
		tr := &http.Transport{
			TLSClientConfig:       tlsCfg,
			DialContext:           (&net.Dialer{Timeout: agentDialTimeout}).DialContext,
			TLSHandshakeTimeout:   agentDialTimeout,
			ResponseHeaderTimeout: 30 * time.Second,
		}
		return &url.URL{Scheme: "https", Host: hostPort}, tr, nil
	}
}

// agentDialTimeout bounds reaching a device: one whose link is down
// must not hold the client.
const agentDialTimeout = 10 * time.Second

// The subresources proxied to the agent, and the agent's paths for them.
var streamSubresources = map[string]string{"exec": "/exec/", "attach": "/attach/", "portforward": "/portForward/"}

// handlePodStream proxies pods/exec, pods/attach and pods/portforward to
// the agent of the pod's node, as kube-apiserver does to the kubelet:
// the client's upgrade (WebSocket or SPDY) passes through, so the
// protocol is between kubectl and the agent. Each session is audited
// when it starts and when it ends.
func (s *Server) handlePodStream(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	if ri.Resource.Kind != "Pod" {
		return notFoundPath(r)
	}
	if ri.Verb != "get" && ri.Verb != "create" {
		return methodNotAllowed(ri.Resource, r.Method)
	}
	q := r.URL.Query()
	agentQuery := url.Values{}
	var container string
	var command []string
	if ri.Subresource == "portforward" {
		for _, p := range q[corev1.PortHeader+"s"] {
			if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
				return badRequest("ports=%q: not a port number (1-65535)", p)
			}
			agentQuery.Add("ports", p)
		}
	} else {
		opts, err := parseStreamOptions(q, ri.Subresource == "exec")
		if err != nil {
			return err
		}
		command = opts.Command
		container = opts.Container
		for _, f := range []struct {
			on   bool
			name string
		}{{opts.Stdin, corev1.ExecStdinParam}, {opts.Stdout, corev1.ExecStdoutParam}, {opts.Stderr, corev1.ExecStderrParam}, {opts.TTY, corev1.ExecTTYParam}} {
			if f.on {
				agentQuery.Set(f.name, "1")
			}
		}
		for _, c := range command {
			agentQuery.Add(corev1.ExecCommandParam, c)
		}
	}
	if err := s.cache.waitFresh(r.Context()); err != nil {
		return err
	}
	co := s.cache.get(ri.Resource, ri.Namespace, ri.Name)
	if co == nil {
		return apierrors.NewNotFound(ri.Resource.GVR.GroupResource(), ri.Name)
	}
	pod := co.obj.(*corev1.Pod)
	agentPath := streamSubresources[ri.Subresource] + pod.Namespace + "/" + pod.Name
	if ri.Subresource != "portforward" {
		var err error
		if container, err = logContainer(pod, container); err != nil {
			return err
		}
		agentPath += "/" + container
	}
	if pod.Spec.NodeName == "" {
		return badRequest("pod %s does not have a host assigned", pod.Name)
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return badRequest("cannot %s into a container in a completed pod; current phase is %s", ri.Subresource, pod.Status.Phase)
	}
	nodes, _ := api.ResourceFor(corev1.SchemeGroupVersion.WithResource("nodes"))
	nco := s.cache.get(nodes, "", pod.Spec.NodeName)
	if nco == nil {
		return badRequest("pod %s is bound to node %s, which does not exist", pod.Name, pod.Spec.NodeName)
	}
	node := nco.obj.(*corev1.Node)
	if err := nodeReachable(node); err != nil {
		return err
	}
	if s.cfg.AgentConn == nil {
		return apierrors.NewServiceUnavailable("this hub is not set up to reach its agents")
	}
	base, tr, err := s.cfg.AgentConn(node)
	if err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	loc := *base
	loc.Path, loc.RawQuery = agentPath, agentQuery.Encode()

	rr := recordFrom(r.Context())
	audit := func(stage string, code int, reason string) {
		if s.cfg.Audit == nil {
			return
		}
		ev := AuditEvent{Time: s.now().UTC(), SourceIP: sourceIP(r), UserAgent: r.UserAgent(), Verb: ri.Verb,
			Resource: "pods", Subresource: ri.Subresource, Namespace: ri.Namespace, Name: ri.Name,
			Code: code, Reason: reason, Stage: stage, Container: container, Command: command, Node: node.Name}
		if rr != nil {
			ev.User = rr.user
		}
		s.cfg.Audit.Audit(ev)
	}
	if rr != nil {
		rr.audited = true // the session's own entries stand for the request
	}
	audit(StageSessionStarted, 0, "")
	hw := &sessionWriter{statusRecorder{ResponseWriter: w}}
	responder := &agentResponder{node: node.Name}
	h := proxy.NewUpgradeAwareHandler(&loc, tr, false, true, responder)
	h.UseLocationHost = true
	h.ServeHTTP(hw, r)
	code, reason := hw.code(), ""
	if responder.err != nil {
		code, reason = http.StatusServiceUnavailable, responder.err.Error()
	}
	audit(StageSessionEnded, code, reason)
	return nil
}

// The audit stages of a streaming session.
const (
	StageSessionStarted = "SessionStarted"
	StageSessionEnded   = "SessionEnded"
)

// nodeReachable refuses, at once and saying why, a pod on a device the
// hub has lost: dialling it would only time out.
func nodeReachable(node *corev1.Node) error {
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return nil
		}
		why := c.Reason
		if c.Message != "" {
			why += ": " + c.Message
		}
		return apierrors.NewServiceUnavailable(fmt.Sprintf("the device %s cannot be reached: its Node is not Ready (%s), its link to the hub is down; try again when it is back", node.Name, why))
	}
	return apierrors.NewServiceUnavailable(fmt.Sprintf("the device %s cannot be reached: its Node has not reported Ready yet", node.Name))
}

// agentResponder answers a session whose agent cannot be reached.
type agentResponder struct {
	node string
	err  error
}

func (a *agentResponder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	a.err = err
	st := apierrors.NewServiceUnavailable(fmt.Sprintf("the device %s cannot be reached: %v", a.node, err)).ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	writeJSON(w, int(st.Code), &st)
}

// sessionWriter lets the upgrade-aware proxy take over the client's
// connection through the hub's response wrappers and lifts the server's
// deadlines from it (a session lasts as long as the user likes); the
// status it records (101 once taken over) goes to the audit.
type sessionWriter struct {
	statusRecorder
}

func (s *sessionWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, errors.Join(errors.New("the connection cannot be taken over for streaming (use HTTP/1.1)"), err)
	}
	c.SetDeadline(time.Time{})
	s.status = http.StatusSwitchingProtocols
	return c, brw, nil
}

// parseStreamOptions reads PodExecOptions (or PodAttachOptions) from the
// query, with kube-apiserver's checks.
func parseStreamOptions(q url.Values, exec bool) (*corev1.PodExecOptions, error) {
	opts := &corev1.PodExecOptions{Container: q.Get("container"), Command: q["command"]}
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"stdin", &opts.Stdin}, {"stdout", &opts.Stdout}, {"stderr", &opts.Stderr}, {"tty", &opts.TTY}} {
		if v := q.Get(b.name); v != "" {
			x, err := strconv.ParseBool(v)
			if err != nil {
				return nil, badRequest("%s=%q is not true or false", b.name, v)
			}
			*b.dst = x
		}
	}
	if exec && len(opts.Command) == 0 {
		return nil, badRequest("you must specify at least one command for the container")
	}
	if !opts.Stdin && !opts.Stdout && !opts.Stderr {
		return nil, badRequest("you must specify at least one of stdin, stdout, stderr")
	}
	return opts, nil
}
