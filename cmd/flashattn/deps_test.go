package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The library (the root package) must not pull in the command's
// dependencies: gonum's plotting (bench and train figures) and the
// application packages under cmd/flashattn/internal stay out of the
// import graph of a program that only imports flashattn.
func TestLibraryDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "list", "-deps", "github.com/flashattn/flashattn").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "gonum.org/v1/plot") || strings.HasPrefix(pkg, "github.com/flashattn/flashattn/cmd/") {
			t.Errorf("the root package depends on %s", pkg)
		}
	}
}
