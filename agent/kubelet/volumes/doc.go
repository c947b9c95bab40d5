// Package volumes owns a pod's volumes on the device: it makes each volume
// of a pod spec ready under the pod's directory (RootDir/<pod-uid>/volumes)
// and keeps it current, and removes them when the pod is gone.
//
//   - emptyDir: a directory; medium Memory mounts a tmpfs there (bounded
//     by sizeLimit).
//   - hostPath: checked against its type (Directory, DirectoryOrCreate,
//     File, FileOrCreate, Socket, CharDevice, BlockDevice) and used in place.
//   - configMap, secret, downwardAPI and projected (of those three): files
//     written by an atomic writer like the kubelet's: the content lives in
//     a timestamped directory, "..data" is a symlink to it, and each
//     top-level name is a symlink through "..data"; an update writes a new
//     directory and swaps "..data" with one rename, so a reader never sees
//     a half-written set. Secret volumes are on a tmpfs so that secrets
//     never reach the disk.
//
// SetUp is idempotent and cheap when nothing changed, so the pod worker
// calls it on every sync; that is how changed ConfigMaps and Secrets reach
// running containers. A volume that cannot be set up is an *Error whose
// message is Kubernetes' FailedMount text.
package volumes
