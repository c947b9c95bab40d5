package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"flotilla.dev/flotilla/test/testimage"
)

func main() {
	registry := flag.String("registry", "", "registry host:port (plain HTTP)")
	name := flag.String("name", "", "repository name, e.g. demo/hello")
	source := flag.String("source", "", "Go package or directory to build")
	ports := flag.String("ports", "", "exposed ports, e.g. 8080/tcp")
	flag.Parse()
	if *registry == "" || *name == "" || *source == "" {
		fmt.Fprintln(os.Stderr, "usage: push-image -registry HOST:PORT -name NAME -source PKG [-ports 8080/tcp]")
		os.Exit(2)
	}
	opts := testimage.Options{}
	if *ports != "" {
		opts.ExposedPorts = strings.Split(*ports, ",")
	}
	img, err := testimage.BuildImage(&testimage.Registry{Host: *registry}, *name, *source, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "push-image:", err)
		os.Exit(1)
	}
	fmt.Println(img.Ref)
}
