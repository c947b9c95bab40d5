// Package fromclientset lets a client-go kubernetes.Interface (a
// Clientset, or the fake one of unit tests) stand where the agent's code
// takes a hubclient.Interface: for tests and for test/simdevice, which
// run the agent's parts with the clients they already have.
//
// The agent binary must not import it: it links client-go's Clientset and
// with it every API group, which is what hubclient exists to avoid
// (cmd/flotilla-agent's TestLinksOnlyWhatADeviceNeeds fails if it does).
package fromclientset
