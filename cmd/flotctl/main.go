package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"flotilla.dev/flotilla/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ctl.Main(ctx, ctl.NewApp(), os.Args[1:])
	stop()
	os.Exit(code)
}
