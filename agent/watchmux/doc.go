// Package watchmux carries a client's watches on one stream to the hub
// (agentapi.PathWatches) instead of one HTTP/2 stream each.
//
// Transport is an http.RoundTripper that sits under client-go's REST
// clients: a watch (a GET with watch=true) that passes through it becomes
// one watch of a multiplexed stream, and its answer is a response whose
// body carries exactly the frames the watch's own GET would have carried,
// so client-go decodes it as always. Everything else passes through.
//
// The stream is opened again when a watch joins it, when the hub ends it
// (its watch timeout) or ends one of its watches, and each watch resumes
// from the revision its last frame brought it to: a watch's reader sees
// one unbroken stream. When the hub cannot be reached, the watches end as
// their own streams would have, and their informers ask again. A hub that
// serves no multiplexed watches (an older one) is sent the watches as
// GETs, and asked again after a while.
package watchmux
