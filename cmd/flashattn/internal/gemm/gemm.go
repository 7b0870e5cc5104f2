// Package gemm multiplies dense float32 matrices on flashattn's
// microkernels (package kernel): C is cut into tiles that are computed in
// parallel, and each tile walks the shared dimension in cache-sized chunks
// so that the panel of B it reuses stays in L1 and the block of A in L2.
//
// Every tile of C is computed by one goroutine in a fixed order, so results
// are bit-identical for any number of workers. Matrices are row-major with
// explicit leading dimensions; any m, n, k works (column counts that are not
// a multiple of kernel.W go through a padded scratch tile).
package gemm

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/flashattn/flashattn/internal/kernel"
)

// Tile sizes: a task owns an mc × nc block of C and walks k in chunks of kc.
// The B panel of one microkernel column block (kc × 32 floats) is 32 KiB at
// kc = 256; an mc × kc block of A is 48 KiB.
const (
	mc = 48
	nc = 128
	kc = 256
)

// Engine runs matrix products with one kernel implementation on a number
// of goroutines. It is safe for concurrent use.
type Engine struct {
	im      kernel.Impl
	workers int
	scratch sync.Pool // *[]float32 for transposes and padded tails
}

// New returns an Engine using kernel.Active().Impl on the given number of
// workers (0 or less: GOMAXPROCS).
func New(workers int) *Engine {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &Engine{im: kernel.Active().Impl, workers: workers}
}

// Kernel returns the name of the kernel implementation in use.
func (e *Engine) Kernel() string { return e.im.Name }

// AB computes C = A·B, or C += A·B if acc, for A m×k (lda), B k×n (ldb),
// C m×n (ldc).
func (e *Engine) AB(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, acc bool) {
	check("AB", c, ldc, m, n)
	check("AB A", a, lda, m, k)
	check("AB B", b, ldb, k, n)
	e.run(false, c, ldc, a, lda, b, ldb, m, n, k, acc)
}

// AtB computes C = Aᵀ·B, or C += Aᵀ·B if acc, for A k×m (lda), B k×n
// (ldb), C m×n (ldc).
func (e *Engine) AtB(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, acc bool) {
	check("AtB", c, ldc, m, n)
	check("AtB A", a, lda, k, m)
	check("AtB B", b, ldb, k, n)
	e.run(true, c, ldc, a, lda, b, ldb, m, n, k, acc)
}

// ABt computes C = A·Bᵀ, or C += A·Bᵀ if acc, for A m×k (lda), B n×k
// (ldb), C m×n (ldc). B is transposed once into a scratch buffer (n·k
// floats), which is cheap beside the product when m is large.
func (e *Engine) ABt(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, acc bool) {
	check("ABt", c, ldc, m, n)
	check("ABt A", a, lda, m, k)
	check("ABt B", b, ldb, n, k)
	bt := e.get(k * n)
	Transpose(*bt, n, b, ldb, n, k)
	e.run(false, c, ldc, a, lda, *bt, n, m, n, k, acc)
	e.scratch.Put(bt)
}

// Transpose writes the transpose of the rows×cols matrix src (leading
// dimension lds) into dst (cols×rows, leading dimension ldd).
func Transpose(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	const blk = 32
	for i0 := 0; i0 < rows; i0 += blk {
		for j0 := 0; j0 < cols; j0 += blk {
			for i := i0; i < min(rows, i0+blk); i++ {
				s := src[i*lds:]
				for j := j0; j < min(cols, j0+blk); j++ {
					dst[j*ldd+i] = s[j]
				}
			}
		}
	}
}

func (e *Engine) get(n int) *[]float32 {
	p, _ := e.scratch.Get().(*[]float32)
	if p == nil {
		p = new([]float32)
	}
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// check panics if a rows×cols matrix with leading dimension ld does not fit
// in x: the callers are this module's own code, so a misfit is a bug.
func check(what string, x []float32, ld, rows, cols int) {
	if rows < 0 || cols < 0 || ld < cols {
		panic(fmt.Sprintf("gemm: internal error: %s: bad shape %d×%d with ld %d", what, rows, cols, ld))
	}
	if rows > 0 && cols > 0 && (rows-1)*ld+cols > len(x) {
		panic(fmt.Sprintf("gemm: internal error: %s: %d×%d (ld %d) needs %d floats, have %d", what, rows, cols, ld, (rows-1)*ld+cols, len(x)))
	}
}

// run computes C (+)= op(A)·B; at says op(A) = Aᵀ.
func (e *Engine) run(at bool, c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, acc bool) {
	if m == 0 || n == 0 {
		return
	}
	nMain := n / kernel.W * kernel.W
	rowTiles := (m + mc - 1) / mc
	colTiles := (nMain + nc - 1) / nc
	tail := n - nMain
	tasks := rowTiles * colTiles
	if tail > 0 {
		tasks += rowTiles
	}
	mul := e.im.MulAddAB
	if at {
		mul = e.im.MulAddAtB
	}
	// aAt returns the start of A's block for rows i0.. and depth p0...
	aAt := func(i0, p0 int) []float32 {
		if at {
			return a[p0*lda+i0:]
		}
		return a[i0*lda+p0:]
	}
	task := func(t int) {
		ti := t % rowTiles
		i0 := ti * mc
		i1 := min(m, i0+mc)
		if t >= rowTiles*colTiles {
			e.tailTile(mul, aAt, lda, c, ldc, b, ldb, i0, i1, nMain, n, k, acc)
			return
		}
		j0 := (t / rowTiles) * nc
		j1 := min(nMain, j0+nc)
		if !acc {
			for i := i0; i < i1; i++ {
				clear(c[i*ldc+j0 : i*ldc+j1])
			}
		}
		for p0 := 0; p0 < k; p0 += kc {
			mul(c[i0*ldc+j0:], ldc, aAt(i0, p0), lda, b[p0*ldb+j0:], ldb, i1-i0, j1-j0, min(kc, k-p0))
		}
	}
	e.Parallel(tasks, task)
}

// tailTile computes columns nMain..n-1 of rows i0..i1-1 through a scratch
// tile padded to kernel.W columns.
func (e *Engine) tailTile(mul func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int),
	aAt func(i0, p0 int) []float32, lda int, c []float32, ldc int, b []float32, ldb int, i0, i1, nMain, n, k int, acc bool) {
	const w = kernel.W
	tail := n - nMain
	rows := i1 - i0
	buf := e.get(rows*w + min(k, kc)*w)
	ct, bt := (*buf)[:rows*w], (*buf)[rows*w:]
	for i := 0; i < rows; i++ {
		row := ct[i*w : (i+1)*w]
		clear(row)
		if acc {
			copy(row, c[(i0+i)*ldc+nMain:(i0+i)*ldc+n])
		}
	}
	for p0 := 0; p0 < k; p0 += kc {
		kk := min(kc, k-p0)
		for p := 0; p < kk; p++ {
			row := bt[p*w : (p+1)*w]
			copy(row, b[(p0+p)*ldb+nMain:(p0+p)*ldb+n])
			clear(row[tail:])
		}
		mul(ct, w, aAt(i0, p0), lda, bt, w, rows, w, kk)
	}
	for i := 0; i < rows; i++ {
		copy(c[(i0+i)*ldc+nMain:(i0+i)*ldc+n], ct[i*w:i*w+tail])
	}
	e.scratch.Put(buf)
}

// Parallel runs task(0..n-1) on up to the Engine's number of worker
// goroutines, the calling goroutine being one of them.
func (e *Engine) Parallel(n int, task func(t int)) {
	w := min(e.workers, n)
	if w <= 1 {
		for t := 0; t < n; t++ {
			task(t)
		}
		return
	}
	var next atomic.Int64
	work := func() {
		for t := int(next.Add(1) - 1); t < n; t = int(next.Add(1) - 1) {
			task(t)
		}
	}
	var wg sync.WaitGroup
	for range w - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}
