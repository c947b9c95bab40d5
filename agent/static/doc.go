// Package static owns static pods: the pods a device runs because a
// manifest says so in a directory on the device itself (--manifests-dir,
// /etc/flotilla/manifests by default), whether or not a hub is reachable
// or was ever configured. It is what the Kubernetes kubelet calls the
// file source, and it follows the kubelet's conventions so that what
// users know from Kubernetes holds here.
//
// Source turns the directory into desired pods for the kubelet. The
// directory is the only truth: a pod exists exactly while a valid
// manifest for it is on disk, so deleting a file, or breaking it, stops
// its pods. Changes are noticed through fsnotify, and also by a rescan
// every second (Config.Interval), because inotify is unreliable on some filesystems and
// editors and config-management tools replace files by rename.
//
// A static pod's identity is derived, never stored: its name is
// <name>-<node> (so that mirrors of different devices never collide on the
// hub) and its UID is a hash of the node name, the file path and the pod's
// decoded content. An unchanged manifest therefore yields the same UID
// after an agent restart or a reboot, which is what lets the kubelet adopt
// the containers already running instead of restarting them; an edited
// manifest yields a new UID, so the old pod is stopped and the new one
// started, as in Kubernetes (pods are immutable, a change is a
// replacement).
//
// Manifests are checked as the hub would check a created Pod (defaults,
// then validation), except for the image policy: whoever can write the
// device's manifest directory already controls the device, so tag-only
// images are allowed. A static pod may not reference Secrets, ConfigMaps
// or service accounts, because it must be able to run with no hub to
// fetch them from, and the hub refuses such mirror pods anyway.
//
// Mirrorer makes static pods visible on the hub, as Kubernetes' mirror
// pods: read-only copies, annotated kubernetes.io/config.mirror, that let
// kubectl-style tools see everything a device runs. The mirrors are
// a view only; losing the hub never affects the static pods themselves.
package static
