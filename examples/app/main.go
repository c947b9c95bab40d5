// Command app is the demo application of `make demo`: a small HTTP service
// that says which pod and device answered, with a readiness endpoint and a
// graceful shutdown, as a fleet workload should have.
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	addr := env("LISTEN", ":8080")
	greeting := env("GREETING", "hello")
	var draining atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s from %s on %s (version %s)\n", greeting, env("POD_NAME", "?"), env("NODE_NAME", "?"), env("VERSION", "1"))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			log.Fatalf("listening on %s: %v", addr, err)
		}
	}()
	log.Printf("app listening on %s", addr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	// Stop being ready, let the endpoint leave every device's rules, then
	// finish what is in flight.
	draining.Store(true)
	time.Sleep(2 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	log.Print("app stopped")
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
