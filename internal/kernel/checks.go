package kernel

// Preconditions shared by the wrappers of every platform. A violation is
// a bug in the caller (an internal invariant), so they panic.

func bad(what string) {
	panic("kernel: internal error: " + what)
}

// checkMatrix panics unless a rows×cols matrix with leading dimension ld
// fits in a slice of length n.
func checkMatrix(name string, n, rows, cols, ld int) {
	if rows < 0 || cols < 0 || ld < cols {
		bad(name + ": bad dimensions")
	}
	if rows > 0 && cols > 0 && (rows-1)*ld+cols > n {
		bad(name + ": slice too short")
	}
}

func checkWidth(n int) {
	if n%W != 0 {
		bad("matrix width not a multiple of 16")
	}
}

// checkElem panics unless e is BF16 or F16.
func checkElem(e Elem) {
	if e != BF16 && e != F16 {
		bad("unknown element type " + e.String())
	}
}
