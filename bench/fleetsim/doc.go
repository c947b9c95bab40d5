// Package fleetsim simulates a fleet of devices in one process, for the
// hub's scale figures (`make bench`) and a small run in `make test`.
//
// Each simulated device does on the wire what an agent does, without
// containers: it joins with a token of its own site and gets its own
// certificate (package agent/join, as the agent), talks to the hub over
// its own TLS connection, reports its Node Ready, renews its Lease every
// LeaseInterval, and keeps the watches an agent keeps — its Node
// (reporting it Ready again if the hub marked it otherwise), its pods
// (fieldSelector spec.nodeName), the Services, and its site's
// EndpointSlices (api.SiteSelector) — all in protobuf and on one
// multiplexed stream (agent/watchmux), resuming each from its last
// resourceVersion and listing again only on 410, with jittered backoff
// when the hub is away or answers 429. A pod bound to it is reported
// Running and Ready at once, with an address from its pod CIDR.
//
// A device records when each of its pods first reached its watch, which
// is what the figures are made of.
package fleetsim
