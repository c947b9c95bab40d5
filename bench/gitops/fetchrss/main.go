package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"syscall"
	"time"

	"flotilla.dev/flotilla/gitops/source"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: fetchrss DIR URL BRANCH")
		os.Exit(2)
	}
	start := time.Now()
	r, err := source.Open(os.Args[1], os.Args[2])
	if err == nil {
		ref := source.Ref{Branch: os.Args[3]}
		var commit string
		if commit, err = r.Resolve(context.Background(), ref, nil); err == nil {
			_, err = r.Fetch(context.Background(), ref, commit, nil)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fetchrss:", err)
		os.Exit(1)
	}
	d := time.Since(start)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	_ = json.NewEncoder(os.Stdout).Encode(map[string]int64{"nanos": d.Nanoseconds(), "maxrssKB": ru.Maxrss})
}
