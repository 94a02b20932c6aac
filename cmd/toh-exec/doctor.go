package main

import (
	"fmt"
	"io"
)

// runDoctor is replaced by the doctor implementation.
func runDoctor(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "toh-exec: doctor is not built yet")
	return exitCannotStart
}
