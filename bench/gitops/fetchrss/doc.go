// Command fetchrss fetches one branch shallowly with go-git, as the hub
// does, in a process of its own so that its peak RSS can be read; it
// prints the duration and the peak RSS as JSON.
package main
