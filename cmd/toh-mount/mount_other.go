//go:build !linux

package main

import (
	"fmt"
	"io"
)

func runMount(_ mountOptions, stderr io.Writer) int {
	fmt.Fprintln(stderr, "toh-mount: only Linux is supported")
	return exitFailure
}

func runUnmount(_ string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "toh-mount: only Linux is supported")
	return exitFailure
}
