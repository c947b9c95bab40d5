package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/agentapi"
)

// PodLogsFunc streams a container's log from the node that runs the pod;
// opts.Container is always set. Errors should be StatusErrors (the agent's
// refusal, an unreachable node); others become 500s.
type PodLogsFunc func(ctx context.Context, node *corev1.Node, namespace, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error)

// handlePodLog serves GET pods/<name>/log: it checks the request against
// the pod, then streams what the pod's node answers.
func (s *Server) handlePodLog(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	if ri.Resource.Kind != "Pod" {
		return notFoundPath(r)
	}
	if ri.Verb != "get" {
		return methodNotAllowed(ri.Resource, r.Method)
	}
	opts, err := parsePodLogOptions(r.URL.Query())
	if err != nil {
		return err
	}
	if err := s.cache.waitFresh(r.Context()); err != nil {
		return err
	}
	co := s.cache.get(ri.Resource, ri.Namespace, ri.Name)
	if co == nil {
		return apierrors.NewNotFound(ri.Resource.GVR.GroupResource(), ri.Name)
	}
	pod := co.obj.(*corev1.Pod)
	if opts.Container, err = logContainer(pod, opts.Container); err != nil {
		return err
	}
	if pod.Spec.NodeName == "" {
		return badRequest("pod %s does not have a host assigned", pod.Name)
	}
	nodes, _ := api.ResourceFor(corev1.SchemeGroupVersion.WithResource("nodes"))
	nco := s.cache.get(nodes, "", pod.Spec.NodeName)
	if nco == nil {
		return badRequest("pod %s is bound to node %s, which does not exist", pod.Name, pod.Spec.NodeName)
	}
	if s.cfg.PodLogs == nil {
		return apierrors.NewServiceUnavailable("this hub is not set up to fetch logs from its agents")
	}
	rc, err := s.cfg.PodLogs(r.Context(), nco.obj.(*corev1.Node), pod.Namespace, pod.Name, opts)
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush() // a follow may stay quiet for long
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil // the client left
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && r.Context().Err() == nil {
				s.log.Warn("streaming pod logs ended early", "pod", pod.Namespace+"/"+pod.Name, "node", pod.Spec.NodeName, "err", err)
			}
			return nil // the status line is sent; nothing else to say
		}
	}
}

// logContainer picks the container whose log is asked for, as Kubernetes
// does: the only one when none is named.
func logContainer(pod *corev1.Pod, name string) (string, error) {
	var names, inits []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	for _, c := range pod.Spec.InitContainers {
		inits = append(inits, c.Name)
	}
	var ephemeral []string
	for _, c := range pod.Spec.EphemeralContainers {
		ephemeral = append(ephemeral, c.Name)
	}
	if name == "" {
		if len(names) == 1 {
			return names[0], nil
		}
		msg := fmt.Sprintf("a container name must be specified for pod %s, choose one of: %v", pod.Name, names)
		if len(inits) > 0 {
			msg += fmt.Sprintf(" or one of the init containers: %v", inits)
		}
		return "", apierrors.NewBadRequest(msg)
	}
	if slices.Contains(names, name) || slices.Contains(inits, name) || slices.Contains(ephemeral, name) {
		return name, nil
	}
	return "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, pod.Name))
}

// parsePodLogOptions reads PodLogOptions from the query, with
// Kubernetes' validation.
func parsePodLogOptions(q url.Values) (*corev1.PodLogOptions, error) {
	opts := &corev1.PodLogOptions{Container: q.Get("container")}
	var errs []string
	boolean := func(k string, dst *bool) {
		if v := q.Get(k); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q is not true or false", k, v))
			}
			*dst = b
		}
	}
	number := func(k string, min int64) *int64 {
		v := q.Get(k)
		if v == "" {
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < min {
			errs = append(errs, fmt.Sprintf("%s=%q must be a number >= %d", k, v, min))
			return nil
		}
		return &n
	}
	boolean("follow", &opts.Follow)
	boolean("previous", &opts.Previous)
	boolean("timestamps", &opts.Timestamps)
	boolean("insecureSkipTLSVerifyBackend", &opts.InsecureSkipTLSVerifyBackend)
	opts.TailLines = number("tailLines", 0)
	opts.LimitBytes = number("limitBytes", 1)
	opts.SinceSeconds = number("sinceSeconds", 1)
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("sinceTime=%q is not an RFC 3339 time", v))
		} else {
			mt := metav1.NewTime(t)
			opts.SinceTime = &mt
		}
	}
	if opts.SinceSeconds != nil && opts.SinceTime != nil {
		errs = append(errs, "at most one of sinceTime or sinceSeconds may be specified")
	}
	if st := q.Get("stream"); st != "" && st != corev1.LogStreamAll {
		errs = append(errs, fmt.Sprintf("stream=%q is not supported: this hub serves both streams together (%s)", st, corev1.LogStreamAll))
	}
	if len(errs) > 0 {
		return nil, apierrors.NewBadRequest("invalid log options: " + strings.Join(errs, "; "))
	}
	return opts, nil
}

// AgentPodLogs returns a PodLogsFunc that asks the pod's agent over HTTPS
// at the node's InternalIP and Node.status.daemonEndpoints.kubeletEndpoint
// port, presenting the client certificate credentials returns (read on
// every call, so a renewed one is used) and pinning the agent's serving
// certificate to the hash its Node publishes
// (agentapi.AnnotationServingCertHash).
func AgentPodLogs(credentials func() (certPEM, keyPEM []byte)) PodLogsFunc {
	return func(ctx context.Context, node *corev1.Node, namespace, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
		certPEM, keyPEM := credentials()
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("the hub's client certificate for agents: %w", err))
		}
		u, err := agentLogURL(node, namespace, pod, opts)
		if err != nil {
			return nil, err
		}
		pin := node.Annotations[agentapi.AnnotationServingCertHash]
		if pin == "" {
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("node %s publishes no serving certificate hash (annotation %s), so the hub cannot check whom it talks to; upgrade its agent", node.Name, agentapi.AnnotationServingCertHash))
		}
		tr := &http.Transport{
			TLSClientConfig:       agentapi.PinnedTLSConfig(pin, &cert),
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
			ForceAttemptHTTP2:     true,
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			tr.CloseIdleConnections()
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("cannot reach the agent of node %s: %v", node.Name, err))
		}
		if resp.StatusCode != http.StatusOK {
			defer tr.CloseIdleConnections()
			defer resp.Body.Close()
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return nil, agentError(node.Name, resp.StatusCode, strings.TrimSpace(string(b)))
		}
		return &closeBoth{ReadCloser: resp.Body, tr: tr}, nil
	}
}

// closeBoth closes the response and the transport made for it.
type closeBoth struct {
	io.ReadCloser
	tr *http.Transport
}

func (c *closeBoth) Close() error {
	err := c.ReadCloser.Close()
	c.tr.CloseIdleConnections()
	return err
}

// agentError turns the agent's refusal into the Status the client sees:
// the user's mistakes keep their code, the hub's own (an agent refusing
// the hub) are internal errors.
func agentError(node string, code int, msg string) error {
	switch code {
	case http.StatusBadRequest:
		return apierrors.NewBadRequest(msg)
	case http.StatusNotFound:
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Message: msg}}
	case http.StatusUnauthorized, http.StatusForbidden:
		return apierrors.NewInternalError(fmt.Errorf("the agent of node %s refused the hub (%d): %s", node, code, msg))
	}
	return apierrors.NewGenericServerResponse(code, "get", schema.GroupResource{Resource: "pods/log"}, "", fmt.Sprintf("the agent of node %s: %s", node, msg), 0, true)
}

func agentLogURL(node *corev1.Node, namespace, pod string, opts *corev1.PodLogOptions) (string, error) {
	hostPort, err := agentHostPort(node)
	if err != nil {
		return "", err
	}
	q := url.Values{}
	if opts.Follow {
		q.Set("follow", "true")
	}
	if opts.Previous {
		q.Set("previous", "true")
	}
	if opts.Timestamps {
		q.Set("timestamps", "true")
	}
	if opts.TailLines != nil {
		q.Set("tailLines", strconv.FormatInt(*opts.TailLines, 10))
	}
	if opts.LimitBytes != nil {
		q.Set("limitBytes", strconv.FormatInt(*opts.LimitBytes, 10))
	}
	if opts.SinceSeconds != nil {
		q.Set("sinceSeconds", strconv.FormatInt(*opts.SinceSeconds, 10))
	}
	if opts.SinceTime != nil {
		q.Set("sinceTime", opts.SinceTime.UTC().Format(time.RFC3339))
	}
	u := url.URL{
		Scheme:   "https",
		Host:     hostPort,
		Path:     "/containerLogs/" + namespace + "/" + pod + "/" + opts.Container,
		RawQuery: q.Encode(),
	}
	return u.String(), nil
}

// agentHostPort is where the node's agent listens: its InternalIP (else
// ExternalIP, else HostName) and kubelet endpoint port.
func agentHostPort(node *corev1.Node) (string, error) {
	host := ""
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeHostName} {
		for _, a := range node.Status.Addresses {
			if a.Type == t && host == "" {
				host = a.Address
			}
		}
	}
	if host == "" {
		return "", apierrors.NewServiceUnavailable(fmt.Sprintf("the device %s cannot be reached: its Node reports no address for its agent", node.Name))
	}
	port := int(node.Status.DaemonEndpoints.KubeletEndpoint.Port)
	if port == 0 {
		port = agentapi.AgentPort
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}
