// Command flotilla-hub runs the Flotilla hub: the fleet's API, store,
// controllers and GitOps sources.
package main
