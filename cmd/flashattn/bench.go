package main

import (
	"fmt"
	"io"
)

func runBench(args []string, stdout, stderr io.Writer) error {
	return fmt.Errorf("not built yet")
}
