package ptxsim

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// poison fills registers before a thread starts, so that a read before
// the first write yields an address outside every allocation, a NaN, or
// a true predicate rather than a plausible zero.
const poison = 0x7fbadbad7fbadbad

const (
	running = iota
	waiting // at a barrier
	exited
)

type thread struct {
	r       []uint64
	pc      int
	state   int
	tid     int
	lane    int
	warp    int
	pending []cpCopy   // issued, not committed
	groups  [][]cpCopy // committed, oldest first
}

type cpCopy struct {
	dst  uint64
	data []byte
}

// cta is one thread block being run.
type cta struct {
	m      *Machine
	k      *Kernel
	ctaid  [3]int
	nctaid [3]int
	ntid   int
	params []byte
	sm     *shared
	epoch  int32
}

// inst is a decoded instruction.
type inst struct {
	guard  int // predicate slot, -1 if unguarded
	neg    bool
	exec   func(c *cta, t *thread) error       // per-lane semantics
	warp   func(c *cta, lanes []*thread) error // warp-collective semantics (all 32 lanes)
	kind   int
	target int
	uni    bool   // bra.uni: every live lane of the warp must take the same way
	op     string // the opcode (add.u32), for Machine.Counts
	text   string
	line   int
}

const (
	kNormal = iota
	kBranch
	kRet
	kBarrier
)

// Launch runs kernel k over grid blocks of block threads (x only) with smem
// bytes of dynamic shared memory. args holds each parameter's bits, in
// order.
func (m *Machine) Launch(k *Kernel, grid [3]int, block, smem int, args []uint64) error {
	if len(args) != len(k.params) {
		return fmt.Errorf("ptxsim: %s takes %d parameters, got %d", k.Name, len(k.params), len(args))
	}
	if block <= 0 || block%32 != 0 || block > 1024 {
		return fmt.Errorf("ptxsim: block of %d threads (a positive multiple of 32 up to 1024, please)", block)
	}
	size := 0
	for _, p := range k.params {
		size = p.off + p.size
	}
	params := make([]byte, size)
	for i, p := range k.params {
		if p.size == 4 {
			binary.LittleEndian.PutUint32(params[p.off:], uint32(args[i]))
		} else {
			binary.LittleEndian.PutUint64(params[p.off:], args[i])
		}
	}
	for z := 0; z < grid[2]; z++ {
		for y := 0; y < grid[1]; y++ {
			for x := 0; x < grid[0]; x++ {
				c := &cta{m: m, k: k, ctaid: [3]int{x, y, z}, nctaid: grid, ntid: block, params: params, sm: newShared(smem)}
				if err := c.run(); err != nil {
					return fmt.Errorf("ptxsim: %s block (%d,%d,%d): %w", k.Name, x, y, z, err)
				}
			}
		}
	}
	return nil
}

// run executes the block: each warp runs until it waits at a barrier or
// exits; when every warp waits, the barrier opens.
func (c *cta) run() error {
	nw := c.ntid / 32
	warps := make([][]*thread, nw)
	for w := range warps {
		warps[w] = make([]*thread, 32)
		for l := range warps[w] {
			t := &thread{r: make([]uint64, c.k.nslots), tid: 32*w + l, lane: l, warp: w}
			for i := range t.r {
				t.r[i] = poison
			}
			warps[w][l] = t
		}
	}
	for {
		for w := range warps {
			if err := c.runWarp(warps[w]); err != nil {
				return fmt.Errorf("warp %d: %w", w, err)
			}
		}
		// Every warp is now waiting or exited.
		any := false
		for _, ws := range warps {
			for _, t := range ws {
				if t.state == waiting {
					t.state = running
					t.pc++
					any = true
				}
			}
		}
		if !any {
			return nil
		}
		c.epoch++
	}
}

// runWarp runs a warp's lanes in lockstep (lowest program counter first)
// until all of them wait at a barrier or have exited.
func (c *cta) runWarp(lanes []*thread) error {
	group := make([]*thread, 0, 32)
	for steps := 0; ; steps++ {
		if steps > 50_000_000 {
			return errors.New("no progress after 5e7 instructions (infinite loop?)")
		}
		pc := -1
		for _, t := range lanes {
			if t.state == running && (pc < 0 || t.pc < pc) {
				pc = t.pc
			}
		}
		if pc < 0 {
			return nil
		}
		if pc >= len(c.k.code) {
			return errors.New("ran past the end of the kernel")
		}
		in := c.k.code[pc]
		group = group[:0]
		for _, t := range lanes {
			if t.state == running && t.pc == pc {
				group = append(group, t)
			}
		}
		if err := c.step(in, lanes, group); err != nil {
			return fmt.Errorf("line %d %q (lane %d): %w", in.line, in.text, group[0].lane, err)
		}
	}
}

// step executes in for the lanes in group.
func (c *cta) step(in *inst, lanes, group []*thread) error {
	if in.uni {
		if err := uniform(c, in, lanes, group); err != nil {
			return err
		}
	}
	if c.m.Counts != nil {
		n := 0
		for _, t := range group {
			if c.guard(in, t) {
				n++
			}
		}
		c.m.Counts[in.op] += int64(n)
	}
	if in.warp != nil {
		active := 0
		for _, t := range lanes {
			if t.state != exited {
				active++
			}
		}
		if len(group) != 32 || active != 32 {
			return fmt.Errorf("warp-collective instruction executed by %d of %d live lanes (divergence)", len(group), active)
		}
		for _, t := range group {
			if !c.guard(in, t) {
				return errors.New("warp-collective instruction under a false predicate")
			}
		}
		if err := in.warp(c, group); err != nil {
			return err
		}
		for _, t := range group {
			t.pc++
		}
		return nil
	}
	for _, t := range group {
		if !c.guard(in, t) {
			t.pc++
			continue
		}
		switch in.kind {
		case kBranch:
			t.pc = in.target
		case kRet:
			t.state = exited
		case kBarrier:
			t.state = waiting // pc advances when the barrier opens
		default:
			if err := in.exec(c, t); err != nil {
				return err
			}
			t.pc++
		}
	}
	return nil
}

// uniform reports a bra.uni that the warp's live lanes do not reach
// together or do not all take (or all fall through).
func uniform(c *cta, in *inst, lanes, group []*thread) error {
	live := 0
	for _, t := range lanes {
		if t.state != exited {
			live++
		}
	}
	taken := 0
	for _, t := range group {
		if c.guard(in, t) {
			taken++
		}
	}
	if len(group) != live || (taken != 0 && taken != live) {
		return fmt.Errorf("bra.uni taken by %d of %d lanes here, %d live (divergence)", taken, len(group), live)
	}
	return nil
}

func (c *cta) guard(in *inst, t *thread) bool {
	if in.guard < 0 {
		return true
	}
	return (t.r[in.guard] != 0) != in.neg
}
