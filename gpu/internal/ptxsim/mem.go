package ptxsim

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// Machine holds the simulated device memory.
type Machine struct {
	allocs []*alloc // sorted by base
	next   uint64

	// Counts, when not nil, receives per opcode (as written: "mul.f32",
	// "bra.uni") the number of lane executions of Launch's kernels: each
	// lane whose guard predicate held counts once, a warp-collective
	// instruction 32 times.
	Counts map[string]int64
}

type alloc struct {
	base uint64
	data []byte
}

// New returns an empty machine.
func New() *Machine { return &Machine{next: 0x10000000} }

// Alloc allocates n bytes (zeroed; real device memory is not) and returns
// their address; allocations are 256-byte aligned with a gap between them so
// that overruns fault.
func (m *Machine) Alloc(n int) (uint64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("ptxsim: Alloc(%d)", n)
	}
	a := &alloc{base: m.next, data: make([]byte, n)}
	m.next += (uint64(n)+255)/256*256 + 4096
	m.allocs = append(m.allocs, a)
	return a.base, nil
}

// Allocations returns the number of live allocations.
func (m *Machine) Allocations() int { return len(m.allocs) }

// Free frees an allocation.
func (m *Machine) Free(p uint64) error {
	for i, a := range m.allocs {
		if a.base == p {
			m.allocs = append(m.allocs[:i], m.allocs[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("ptxsim: Free(%#x): not an allocation", p)
}

// span returns the n bytes at p, or an error if they are not all inside
// one allocation.
func (m *Machine) span(p uint64, n int) ([]byte, error) {
	i := sort.Search(len(m.allocs), func(i int) bool { return m.allocs[i].base > p }) - 1
	if i >= 0 {
		a := m.allocs[i]
		if p+uint64(n) <= a.base+uint64(len(a.data)) {
			return a.data[p-a.base:][:n], nil
		}
	}
	return nil, fmt.Errorf("global access of %d bytes at %#x outside every allocation", n, p)
}

// Write copies b to device address p.
func (m *Machine) Write(p uint64, b []byte) error {
	return m.host(p, len(b), func(s []byte) { copy(s, b) })
}

// Read copies device memory at p into b.
func (m *Machine) Read(p uint64, b []byte) error {
	return m.host(p, len(b), func(s []byte) { copy(b, s) })
}

// Zero clears n bytes at p.
func (m *Machine) Zero(p uint64, n int) error {
	return m.host(p, n, func(s []byte) { clear(s) })
}

// host calls f with the n bytes at device address p, for the host-side
// accessors (Write, Read, Zero): their errors carry the package's prefix.
func (m *Machine) host(p uint64, n int, f func(s []byte)) error {
	s, err := m.span(p, n)
	if err != nil {
		return fmt.Errorf("ptxsim: %w", err)
	}
	f(s)
	return nil
}

func (m *Machine) load(p uint64, n int) (uint64, error) {
	if p%uint64(n) != 0 {
		return 0, fmt.Errorf("misaligned %d-byte global load at %#x", n, p)
	}
	s, err := m.span(p, n)
	if err != nil {
		return 0, err
	}
	if n == 4 {
		return uint64(binary.LittleEndian.Uint32(s)), nil
	}
	return binary.LittleEndian.Uint64(s), nil
}

func (m *Machine) store(p uint64, n int, v uint64) error {
	if p%uint64(n) != 0 {
		return fmt.Errorf("misaligned %d-byte global store at %#x", n, p)
	}
	s, err := m.span(p, n)
	if err != nil {
		return err
	}
	if n == 4 {
		binary.LittleEndian.PutUint32(s, uint32(v))
	} else {
		binary.LittleEndian.PutUint64(s, v)
	}
	return nil
}

// shared is a block's shared memory with the state the race checks need,
// kept per 4-byte word (every access the kernels make is word-aligned and
// a whole number of words).
type shared struct {
	data    []byte
	wWarp   []int8  // last writer warp+1 (0: none)
	wEpoch  []int32 // barrier epoch of the last write
	rEpoch  []int32 // epoch of the readers in rMask
	rMask   []uint32
	pending []int16 // cp.async copies in flight targeting the word
}

func newShared(n int) *shared {
	w := (n + 3) / 4
	return &shared{data: make([]byte, n), wWarp: make([]int8, w), wEpoch: make([]int32, w),
		rEpoch: make([]int32, w), rMask: make([]uint32, w), pending: make([]int16, w)}
}

func (s *shared) check(addr uint64, n int) error {
	if addr+uint64(n) > uint64(len(s.data)) {
		return fmt.Errorf("shared access of %d bytes at %#x past the block's %d bytes", n, addr, len(s.data))
	}
	if addr%uint64(min(n, 16)) != 0 || n%4 != 0 {
		return fmt.Errorf("misaligned %d-byte shared access at %#x", n, addr)
	}
	return nil
}

// words checks the access [addr, addr+n) and calls f for each of its
// 4-byte words i, up to f's first error.
func (s *shared) words(addr uint64, n int, f func(i uint64) error) error {
	if err := s.check(addr, n); err != nil {
		return err
	}
	for i := addr / 4; i < (addr+uint64(n))/4; i++ {
		if err := f(i); err != nil {
			return err
		}
	}
	return nil
}

// readByOther reports whether a warp other than w read word i in epoch e
// (since the last barrier).
func (s *shared) readByOther(i uint64, w int, e int32) bool {
	return s.rEpoch[i] == e && s.rMask[i]&^(1<<w) != 0
}

// writtenByOther reports whether a warp other than w wrote word i in epoch
// e (since the last barrier).
func (s *shared) writtenByOther(i uint64, w int, e int32) bool {
	return s.wEpoch[i] == e && s.wWarp[i] != 0 && int(s.wWarp[i]) != w+1
}

// read records a read by warp w in epoch e and reports races.
func (s *shared) read(addr uint64, n, w int, e int32) error {
	return s.words(addr, n, func(i uint64) error {
		if s.pending[i] > 0 {
			return fmt.Errorf("shared read at %#x of data a cp.async copy has not completed (missing cp.async.wait_group?)", 4*i)
		}
		if s.writtenByOther(i, w, e) {
			return fmt.Errorf("race: warp %d reads shared %#x written by warp %d since the last barrier", w, 4*i, s.wWarp[i]-1)
		}
		if s.rEpoch[i] != e {
			s.rEpoch[i], s.rMask[i] = e, 0
		}
		s.rMask[i] |= 1 << w
		return nil
	})
}

// write records a write by warp w in epoch e and reports races.
func (s *shared) write(addr uint64, n, w int, e int32) error {
	return s.words(addr, n, func(i uint64) error {
		if s.readByOther(i, w, e) {
			return fmt.Errorf("race: warp %d writes shared %#x read by another warp (mask %#x) since the last barrier", w, 4*i, s.rMask[i])
		}
		if s.writtenByOther(i, w, e) {
			return fmt.Errorf("race: warps %d and %d write shared %#x since the last barrier", w, s.wWarp[i]-1, 4*i)
		}
		s.wWarp[i], s.wEpoch[i] = int8(w+1), e
		return nil
	})
}

// asyncIssue records a cp.async copy by warp w in epoch e into
// [addr, addr+n): the bytes may change from now on.
func (s *shared) asyncIssue(addr uint64, n, w int, e int32) error {
	return s.words(addr, n, func(i uint64) error {
		if s.readByOther(i, w, e) {
			return fmt.Errorf("race: warp %d starts a cp.async into shared %#x read by another warp since the last barrier", w, 4*i)
		}
		if s.pending[i] > 0 {
			return fmt.Errorf("two cp.async copies in flight into shared %#x", 4*i)
		}
		s.pending[i]++
		return nil
	})
}

// asyncDone completes a copy: the data lands, written by warp w in epoch e.
func (s *shared) asyncDone(addr uint64, data []byte, w int, e int32) {
	copy(s.data[addr:], data)
	for i := addr / 4; i < (addr+uint64(len(data)))/4; i++ {
		s.pending[i]--
		s.wWarp[i], s.wEpoch[i] = int8(w+1), e
	}
}
