package kubelet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"

	"flotilla.dev/flotilla/agent/kubelet/envvars"
	"flotilla.dev/flotilla/agent/kubelet/probes"
	"flotilla.dev/flotilla/agent/kubelet/volumes"
	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/registry/trust"
)

// waitErr is a container that cannot start yet, for a reason already
// recorded as its waiting state and in an Event. retry, when set, is when
// to try again (a backoff running out); otherwise the worker's error
// backoff decides.
type waitErr struct {
	reason, msg string
	retry       time.Duration
}

func (e *waitErr) Error() string { return e.reason + ": " + e.msg }
func (e *waitErr) Unwrap() error { return errWaiting }

// setWaiting records why container c waits; an Event goes out when the
// reason or message is new, so retries do not flood the hub.
func (k *Kubelet) setWaiting(w *podWorker, pod *corev1.Pod, c, reason, msg string, retry time.Duration) *waitErr {
	prev, had := w.waiting[c]
	w.waiting[c] = waiting{Reason: reason, Message: msg}
	if !had || prev != w.waiting[c] {
		switch reason {
		case "CrashLoopBackOff":
			k.event(pod, c, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)", c, pod.Name, pod.Namespace, pod.UID)
		case "ImagePullBackOff":
			k.event(pod, c, corev1.EventTypeNormal, "BackOff", "%s", msg)
		default:
			k.event(pod, c, corev1.EventTypeWarning, "Failed", "Error: %s", msg)
		}
	}
	return &waitErr{reason: reason, msg: msg, retry: retry}
}

// startContainer pulls c's image, builds its configuration, creates and
// starts attempt. Every failure leaves c waiting with Kubernetes' reason.
func (k *Kubelet) startContainer(ctx context.Context, w *podWorker, pod *corev1.Pod, sb *runtime.Sandbox, vols map[string]volumes.Volume, c *corev1.Container, attempt uint32) error {
	image, err := k.ensureImage(ctx, w, pod, c)
	if err != nil {
		return err
	}
	cfg, err := k.containerConfig(ctx, pod, c, sb, vols, image, attempt)
	if err != nil {
		var ce *createErr
		if errors.As(err, &ce) {
			return k.setWaiting(w, pod, c.Name, ce.reason, ce.msg, 0)
		}
		return k.setWaiting(w, pod, c.Name, "CreateContainerConfigError", err.Error(), 0)
	}
	ctr, err := k.rt.CreateContainer(ctx, cfg)
	if errors.Is(err, runtime.ErrAlreadyExists) {
		// Left over from an interrupted attempt: replace it.
		if rerr := k.rt.RemoveContainer(ctx, runtime.ContainerID(string(pod.UID), c.Name, attempt)); rerr != nil {
			return rerr
		}
		ctr, err = k.rt.CreateContainer(ctx, cfg)
	}
	if err != nil {
		return k.setWaiting(w, pod, c.Name, "CreateContainerError", err.Error(), 0)
	}
	k.rememberContainer(ctr.ID, pod.UID)
	k.event(pod, c.Name, corev1.EventTypeNormal, "Created", "Created container %s", c.Name)
	if err := k.rt.StartContainer(ctx, ctr.ID); err != nil {
		w.startErrors[ctr.ID] = err.Error()
		return k.setWaiting(w, pod, c.Name, "RunContainerError", err.Error(), 0)
	}
	delete(w.waiting, c.Name)
	k.event(pod, c.Name, corev1.EventTypeNormal, "Started", "Started container %s", c.Name)
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		target := probes.Target{PodIP: sb.IP, ContainerID: ctr.ID, Ports: c.Ports}
		if err := k.runner.Hook(ctx, c.Lifecycle.PostStart, target, podGrace(pod)); err != nil {
			k.event(pod, c.Name, corev1.EventTypeWarning, "FailedPostStartHook", "%v", err)
			k.event(pod, c.Name, corev1.EventTypeNormal, "Killing", "FailedPostStartHook")
			if _, serr := k.rt.StopContainer(ctx, ctr.ID, k.cfg.MinGracePeriod); serr != nil {
				return serr
			}
		}
	}
	return nil
}

// ensureImage makes c's image present, with Kubernetes' events and
// backoff, and returns its containerd name.
func (k *Kubelet) ensureImage(ctx context.Context, w *podWorker, pod *corev1.Pod, c *corev1.Container) (string, error) {
	image := c.Image
	ref, err := registry.ParseReference(image)
	if err != nil {
		return "", k.setWaiting(w, pod, c.Name, "InvalidImageName", fmt.Sprintf("Failed to apply default image tag %q: %v", image, err), 0)
	}
	present, ok, err := k.cfg.Puller.Present(ctx, ref)
	if err != nil {
		return "", k.setWaiting(w, pod, c.Name, "ImageInspectError", fmt.Sprintf("Failed to inspect image %q: %v", image, err), 0)
	}
	// The pod's image pull secrets are read only when a registry is
	// asked: a present image verified before needs none.
	keys := registry.WithKeychainFunc(func() registry.Keychain { return k.pullKeychain(ctx, pod, c.Name) })
	// A digest cannot move, so Always pulls nothing new for a pinned image.
	if ok && (c.ImagePullPolicy != corev1.PullAlways || ref.Pinned()) {
		key := string(pod.UID) + "/" + image
		now := time.Now()
		if d := k.imageBackoff.waitSinceLast(key, now); d > 0 && w.waiting[c.Name].Reason == trust.WaitingReason {
			return "", k.setWaiting(w, pod, c.Name, trust.WaitingReason, w.waiting[c.Name].Message, d)
		}
		if err := k.cfg.Puller.Reverify(ctx, present, keys); err != nil {
			k.imageBackoff.next(key, now)
			return "", k.refuseImage(w, pod, c, image, err)
		}
		k.recordImageID(present)
		k.event(pod, c.Name, corev1.EventTypeNormal, "Pulled", "Container image %q already present on machine", image)
		return present.Name(), nil
	}
	if !ok && c.ImagePullPolicy == corev1.PullNever {
		return "", k.setWaiting(w, pod, c.Name, "ErrImageNeverPull", fmt.Sprintf("Container image %q is not present with pull policy of Never", image), 0)
	}
	key := string(pod.UID) + "/" + image
	now := time.Now()
	if d := k.imageBackoff.waitSinceLast(key, now); d > 0 {
		if last := w.waiting[c.Name]; last.Reason == trust.WaitingReason {
			// A refused signature stays the reason while the pull backs
			// off: it is what the operator must fix.
			return "", k.setWaiting(w, pod, c.Name, last.Reason, last.Message, d)
		}
		return "", k.setWaiting(w, pod, c.Name, "ImagePullBackOff", fmt.Sprintf("Back-off pulling image %q", image), d)
	}
	k.event(pod, c.Name, corev1.EventTypeNormal, "Pulling", "Pulling image %q", image)
	pulled, err := k.cfg.Puller.Pull(ctx, image, keys)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		k.imageBackoff.next(key, now)
		if errors.Is(err, trust.ErrImageSignature) {
			return "", k.refuseImage(w, pod, c, image, err)
		}
		reason := "ErrImagePull"
		switch {
		case errors.Is(err, registry.ErrNotPinned), errors.Is(err, registry.ErrInvalidReference):
			reason = "InvalidImageName"
		case errors.Is(err, registry.ErrUntrusted):
			reason = "SignatureValidationFailed"
		}
		k.event(pod, c.Name, corev1.EventTypeWarning, "Failed", "Failed to pull image %q: %v", image, err)
		return "", k.setWaiting(w, pod, c.Name, reason, err.Error(), k.imageBackoff.delay(key))
	}
	k.imageBackoff.clear(key)
	k.recordImageID(pulled)
	k.event(pod, c.Name, corev1.EventTypeNormal, "Pulled", "Successfully pulled image %q in %s. Image size: %d bytes.", image, time.Since(now).Round(time.Millisecond), pulled.Size)
	return pulled.Name(), nil
}

// refuseImage holds a container whose image's signature does not verify:
// it waits, with the reason flotctl's Diagnosis reads, and retries with
// the image pull backoff (a signature may be pushed later).
func (k *Kubelet) refuseImage(w *podWorker, pod *corev1.Pod, c *corev1.Container, image string, err error) error {
	key := string(pod.UID) + "/" + image
	k.event(pod, c.Name, corev1.EventTypeWarning, "Failed", "Failed to verify image %q: %v", image, err)
	return k.setWaiting(w, pod, c.Name, trust.WaitingReason, err.Error(), k.imageBackoff.delay(key))
}

func (k *Kubelet) recordImageID(p registry.Pulled) {
	if p.Digest == "" {
		return
	}
	k.mu.Lock()
	k.imageIDs[p.Name()] = p.Ref.Name() + "@" + p.Digest.String()
	k.mu.Unlock()
}

// imageID is the digest reference of a containerd image name.
func (k *Kubelet) imageID(ctx context.Context, name string) string {
	k.mu.Lock()
	id, ok := k.imageIDs[name]
	k.mu.Unlock()
	if ok {
		return id
	}
	if ref, err := registry.ParseReference(name); err == nil {
		if ref.Pinned() {
			id = ref.Name() + "@" + ref.Digest.String()
		} else if p, ok, err := k.cfg.Puller.Present(ctx, ref); err == nil && ok {
			id = p.Ref.Name() + "@" + p.Digest.String()
		}
	}
	if id != "" {
		k.mu.Lock()
		k.imageIDs[name] = id
		k.mu.Unlock()
	}
	return id
}

// labelSpecImage records the image the pod spec named when the container
// was made: the image is the one mutable field of a container, and a
// change restarts the container with the new one.
const labelSpecImage = "flotilla.dev/spec-image"

// specChanged reports whether c's image changed since attempt l was made.
func specChanged(c *corev1.Container, l *runtime.Container) bool {
	img, ok := l.Labels[labelSpecImage]
	return ok && img != c.Image
}

// createErr is a configuration problem with a reason other than
// CreateContainerConfigError.
type createErr struct{ reason, msg string }

func (e *createErr) Error() string { return e.msg }

// containerConfig turns c into the runtime's container configuration.
func (k *Kubelet) containerConfig(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sb *runtime.Sandbox, vols map[string]volumes.Volume, image string, attempt uint32) (runtime.ContainerConfig, error) {
	imgCfg, err := k.rt.ImageConfig(ctx, image)
	if err != nil {
		return runtime.ContainerConfig{}, &createErr{"CreateContainerError", fmt.Sprintf("read config of image %s: %v", c.Image, err)}
	}
	info := envvars.PodInfo{HostIPs: k.nodeHostIPs(ctx), NodeAllocatable: k.cfg.Allocatable}
	if sb.IP != "" {
		info.PodIPs = []string{sb.IP}
	} else if pod.Spec.HostNetwork {
		info.PodIPs = info.HostIPs
	}
	env, err := envvars.Env(ctx, k.objects, pod, c, info)
	if err != nil {
		return runtime.ContainerConfig{}, err
	}
	if len(env.Skipped) > 0 {
		k.event(pod, c.Name, corev1.EventTypeWarning, "InvalidEnvironmentVariableNames",
			"Keys [%s] from the EnvFrom of container %s were skipped since they are invalid environment variable names.", strings.Join(env.Skipped, ", "), c.Name)
	}
	vars := env.Map()
	argv := envvars.Argv(c, imgCfg.Entrypoint, imgCfg.Cmd, vars)
	if len(argv) == 0 {
		return runtime.ContainerConfig{}, &createErr{"CreateContainerError", fmt.Sprintf("no command specified: container %s sets no command and image %s has no entrypoint or cmd", c.Name, c.Image)}
	}
	cfg := runtime.ContainerConfig{
		Pod:        runtime.PodRef{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name},
		Name:       c.Name,
		Attempt:    attempt,
		Image:      image,
		Args:       argv,
		Env:        env.Strings(),
		WorkingDir: c.WorkingDir,
		Sandbox:    sb,
		Labels:     map[string]string{labelSpecImage: c.Image},
		Stdin:      c.Stdin,
		StdinOnce:  c.StdinOnce,
		TTY:        c.TTY,
	}
	for _, vm := range c.VolumeMounts {
		vol, ok := vols[vm.Name]
		if !ok {
			return runtime.ContainerConfig{}, fmt.Errorf("cannot find volume %q to mount into container %q", vm.Name, c.Name)
		}
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			sub = envvars.Expand(vm.SubPathExpr, vars)
		}
		src, err := volumes.SubPath(vol.Path, sub)
		if err != nil {
			return runtime.ContainerConfig{}, fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q: %w", vm.Name, c.Name, err)
		}
		cfg.Mounts = append(cfg.Mounts, runtime.Mount{Source: src, Destination: vm.MountPath, ReadOnly: vm.ReadOnly || vol.ReadOnly})
	}

	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok && !q.IsZero() {
		cfg.MemoryLimit = q.Value()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok && !q.IsZero() {
		const period = 100000
		cfg.CPUPeriod = period
		cfg.CPUQuota = max(q.MilliValue()*period/1000, 1000)
	}
	cfg.CPUShares = 2 // what Kubernetes gives a container that requests no CPU
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok && !q.IsZero() {
		cfg.CPUShares = uint64(max(q.MilliValue()*1024/1000, 2))
	}
	if c.Lifecycle != nil && c.Lifecycle.StopSignal != nil {
		cfg.StopSignal = string(*c.Lifecycle.StopSignal)
	}
	if err := applySecurity(&cfg, pod, c, imgCfg); err != nil {
		return runtime.ContainerConfig{}, err
	}
	return cfg, nil
}

// applySecurity maps the pod's and container's securityContext (the
// container's fields win) onto cfg.
func applySecurity(cfg *runtime.ContainerConfig, pod *corev1.Pod, c *corev1.Container, img ocispec.ImageConfig) error {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	runAsUser, runAsGroup, nonRoot := psc.RunAsUser, psc.RunAsGroup, psc.RunAsNonRoot
	if sc.RunAsUser != nil {
		runAsUser = sc.RunAsUser
	}
	if sc.RunAsGroup != nil {
		runAsGroup = sc.RunAsGroup
	}
	if sc.RunAsNonRoot != nil {
		nonRoot = sc.RunAsNonRoot
	}
	imgUID, imgGID, imgNumeric := parseImageUser(img.User)

	var extra []uint32
	if psc.FSGroup != nil {
		extra = append(extra, uint32(*psc.FSGroup))
	}
	for _, g := range psc.SupplementalGroups {
		extra = append(extra, uint32(g))
	}
	if runAsUser != nil || runAsGroup != nil || len(extra) > 0 {
		u := &runtime.User{UID: imgUID, GID: imgGID, AdditionalGIDs: extra}
		if runAsUser != nil {
			u.UID = uint32(*runAsUser)
		} else if !imgNumeric && img.User != "" {
			return fmt.Errorf("image %s runs as user %q, which is not numeric; set securityContext.runAsUser to use runAsGroup or supplemental groups", c.Image, img.User)
		}
		if runAsGroup != nil {
			u.GID = uint32(*runAsGroup)
		} else if runAsUser != nil && (img.User == "" || !strings.Contains(img.User, ":")) {
			u.GID = 0
		}
		cfg.User = u
	}
	if nonRoot != nil && *nonRoot {
		switch {
		case runAsUser != nil && *runAsUser == 0:
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
		case runAsUser == nil && img.User != "" && !imgNumeric:
			return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", img.User, pod.Namespace+"/"+pod.Name, c.Name)
		case runAsUser == nil && imgUID == 0:
			return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
		}
	}
	if sc.ReadOnlyRootFilesystem != nil {
		cfg.ReadOnlyRootfs = *sc.ReadOnlyRootFilesystem
	}
	if sc.Privileged != nil {
		cfg.Privileged = *sc.Privileged
	}
	if sc.Capabilities != nil {
		for _, a := range sc.Capabilities.Add {
			cfg.CapAdd = append(cfg.CapAdd, string(a))
		}
		for _, d := range sc.Capabilities.Drop {
			cfg.CapDrop = append(cfg.CapDrop, string(d))
		}
	}
	if sc.AllowPrivilegeEscalation != nil {
		cfg.NoNewPrivileges = !*sc.AllowPrivilegeEscalation
	}
	return nil
}

// parseImageUser reads an image's "uid[:gid]"; numeric is false for a
// user name (which only the image's /etc/passwd can resolve).
func parseImageUser(s string) (uid, gid uint32, numeric bool) {
	if s == "" {
		return 0, 0, true
	}
	u, g, _ := strings.Cut(s, ":")
	un, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		return 0, 0, false
	}
	var gn uint64
	if g != "" {
		if gn, err = strconv.ParseUint(g, 10, 32); err != nil {
			return uint32(un), 0, false
		}
	}
	return uint32(un), uint32(gn), true
}

// podGrace is the pod's termination grace period.
func podGrace(pod *corev1.Pod) time.Duration {
	if pod == nil {
		return 30 * time.Second
	}
	if pod.DeletionGracePeriodSeconds != nil {
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return corev1.DefaultTerminationGracePeriodSeconds * time.Second
}
