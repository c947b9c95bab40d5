// Package hubconn connects an agent, or flotctl, to its fleet's hubs when
// there are several (hubs sharing an etcd): every connection goes to the hub that
// answered last, or to the next one that answers, and each hub is checked
// against the name all of a fleet's hubs carry in their certificates
// (agentapi.HubServerName), since their addresses differ. client-go's
// informers re-list and re-watch over the new connection from the
// resourceVersion they had, which etcd makes the same on every hub, so a
// hub's loss costs the agent a reconnect, not its pods.
package hubconn
