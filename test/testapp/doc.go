// Command testapp is the program inside Flotilla's test images: a small
// static HTTP server whose behaviour tests switch with flags, environment
// variables or HTTP calls, so one image covers readiness, liveness, crashes,
// memory limits, graceful termination and "what does the container see".
//
// Server mode (no arguments, or flags only). Every flag also reads an
// environment variable, so a pod manifest can set it:
//
//	-listen        LISTEN          address (":8080")
//	-fail-readiness FAIL_READINESS /readyz answers 503
//	-fail-liveness  FAIL_LIVENESS  /healthz answers 500
//	-crash-after   CRASH_AFTER     exit after this duration ("0s" = at once)
//	-exit-code     EXIT_CODE       exit code for -crash-after (1)
//	-alloc-mib     ALLOC_MIB       allocate and touch this many MiB at start
//	-start-delay   START_DELAY     sleep before listening
//	-drain-delay   DRAIN_DELAY     after SIGTERM, keep serving this long
//	-ignore-sigterm IGNORE_SIGTERM log SIGTERM and keep running
//
// Endpoints: GET /healthz, /readyz; GET / (JSON: hostname, POD_NAME,
// POD_NAMESPACE, request); GET /env (KEY=VALUE lines, sorted); GET
// /file?path=P (the file's bytes); GET /ls?path=D; GET /sleep?d=2s (a slow
// request, to see draining); POST /fail/readiness?on=true|false, POST
// /fail/liveness?on=..., POST /crash?code=N, POST /alloc?mib=N.
//
// On SIGTERM it logs "testapp: SIGTERM", marks itself not ready, waits
// -drain-delay, then shuts the server down (in-flight requests finish) and
// exits 0.
//
// Helper mode, for exec probes and lifecycle hooks inside an image that has
// nothing but this binary: "testapp exit N", "testapp cat FILE",
// "testapp append FILE TEXT", "testapp echo ARGS...", "testapp sleep D",
// "testapp get URL" (exit 0 on a 2xx answer), "testapp winsize" (the
// size of the terminal on stdin, for exec -t), "testapp relay" (each
// line of stdin back as "got LINE" until stdin ends, for attach).
package main
