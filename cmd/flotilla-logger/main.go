package main

import (
	"fmt"
	"os"

	"flotilla.dev/flotilla/agent/runtime/logdriver"
	"flotilla.dev/flotilla/internal/version"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println(version.String("flotilla-logger"))
		return
	}
	os.Exit(logdriver.Main(os.Args[1:], os.Stderr))
}
