package tile

// Masks follow flash-attn's bottom-right alignment: with off = Sk - Sq, query
// row i sees key j iff 0 <= j < Sk and i+off-left <= j <= i+off+right, where
// a negative left or right means unbounded on that side (causal is right = 0).

// Mask is a causal/sliding-window mask of one sequence.
type Mask struct {
	SeqQ, SeqK  int
	Left, Right int // < 0: unbounded
}

// Visible reports whether key j is visible from query row i.
func (m Mask) Visible(i, j int) bool {
	if j < 0 || j >= m.SeqK {
		return false
	}
	pos := i + m.SeqK - m.SeqQ
	if m.Left >= 0 && pos-j > m.Left {
		return false
	}
	if m.Right >= 0 && j-pos > m.Right {
		return false
	}
	return true
}

// KeyBlocks returns the range [lo, hi) of key blocks of bc keys that rows
// [m0, m0+rows) can see. lo >= hi means none.
func (m Mask) KeyBlocks(m0, rows, bc int) (lo, hi int) {
	off := m.SeqK - m.SeqQ
	jlo, jhi := 0, m.SeqK // keys [jlo, jhi)
	if m.Left >= 0 {
		jlo = max(jlo, m0+off-m.Left)
	}
	if m.Right >= 0 {
		jhi = min(jhi, m0+rows-1+off+m.Right+1)
	}
	if jhi <= jlo {
		return 0, 0
	}
	return jlo / bc, (jhi + bc - 1) / bc
}

// QueryBlocks returns the range [lo, hi) of query blocks of br rows that can
// see some key of [n0, n0+cols). lo >= hi means none.
func (m Mask) QueryBlocks(n0, cols, br int) (lo, hi int) {
	off := m.SeqK - m.SeqQ
	n1 := min(n0+cols, m.SeqK)
	ilo, ihi := 0, m.SeqQ
	if m.Right >= 0 {
		ilo = max(ilo, n0-off-m.Right)
	}
	if m.Left >= 0 {
		ihi = min(ihi, n1-1-off+m.Left+1)
	}
	if ihi <= ilo || n1 <= n0 {
		return 0, 0
	}
	return ilo / br, (ihi + br - 1) / br
}

// NeedsMask reports whether the tile of rows [m0, m0+rows) and keys
// [n0, n0+cols) may hold a pair that is not visible (including keys past
// SeqK). When it returns false every pair of the tile is visible, so the
// kernels skip the per-element mask. Rows past SeqQ are not considered
// invisible: the kernels discard them.
func (m Mask) NeedsMask(m0, rows, n0, cols int) bool {
	off := m.SeqK - m.SeqQ
	if n0+cols > m.SeqK {
		return true
	}
	if m.Right >= 0 && n0+cols-1 > m0+off+m.Right {
		return true
	}
	if m.Left >= 0 && n0 < m0+rows-1+off-m.Left {
		return true
	}
	return false
}
