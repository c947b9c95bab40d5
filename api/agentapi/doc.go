// Package agentapi owns the contract between the hub and the agents on
// devices: everything both sides must agree on, written once, so that
// neither keeps a copy that could drift from the other's.
//
//   - Joining and renewing (join.go): the URL paths the hub serves under
//     /join/v1/ and the JSON bodies a device sends and gets back
//     (JoinRequest, RenewRequest, CertificateResponse).
//   - A device's identity (join.go): its certificate is for user
//     system:node:NAME in group system:nodes (NodeUser, NodeNameOf).
//   - Pinning the hub (cahash.go): the CA hash a device is given with its
//     token ("sha256:" and the hex SHA-256 of the CA's public key, as
//     kubeadm's --discovery-token-ca-cert-hash), how it is computed
//     (HashCA) and checked (CheckCAHash).
//   - Certificate requests (csr.go): the key and CSR a device makes for
//     itself, so that its key never leaves it (NewCSR, CSRFor).
//   - The agent's server (server.go): its port (AgentPort, published in
//     the Node's status.daemonEndpoints.kubeletEndpoint), the annotation in
//     which a Node publishes its serving certificate's hash
//     (AnnotationServingCertHash), how that hash is computed
//     (ServingCertHash) and the client TLS configuration that accepts the
//     agent only by it (PinnedTLSConfig).
//   - Node labels (labels.go): the "k=v,k2=v2" syntax of --labels, on the
//     agent and on join tokens, and the Kubernetes rules for keys and
//     values (ParseLabels, ValidateLabels).
//   - Multiplexed watches (watches.go): the path a device POSTs its
//     watches to (PathWatches), the request naming them (WatchesRequest)
//     and the frames of the answer (Frame, AppendFrame, ReadFrame).
//   - Device tunnels (tunnel.go): the path a device opens its tunnel on
//     (PathTunnel), its Upgrade token (TunnelProtocol), the frames that
//     carry its requests and their answers (TunnelFrame,
//     AppendTunnelFrame, ReadTunnelFrame) and its keep-alive timing.
//   - Usage reports (usage.go): the path a device POSTs its usage to
//     (PathUsage), the report's compact JSON (UsageReport) and its bound
//     (MaxUsageReportBytes).
//
// Changing anything here changes the wire between hubs and devices of
// different versions: paths, JSON field names, annotation names and hash
// formats are fixed once released.
//
// The package imports nothing of the hub or the agent, and nothing heavier
// than the standard library and k8s.io/apimachinery's validation, so that
// the agent binary links it without any of the hub.
package agentapi
