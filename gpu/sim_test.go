package gpu

import (
	"fmt"
	"regexp"
	"unsafe"

	"github.com/flashattn/flashattn"

	"github.com/flashattn/flashattn/gpu/internal/cuda"
	"github.com/flashattn/flashattn/gpu/internal/ptxsim"
)

// sim is a backend that runs the embedded PTX on ptxsim's interpreter.
// Work runs at once, whatever the stream; fail, when set, is returned by
// the next launch (a stand-in for a kernel fault), and mutate, when set,
// rewrites each module's PTX text before it is parsed.
type sim struct {
	m       *ptxsim.Machine
	modules []*ptxsim.Module
	kernels []*ptxsim.Kernel
	streams int
	fail    error
	mutate  func(string) string
	log     []launch // the kernels launched, in order
}

// launch is a kernel launch the simulator ran.
type launch struct {
	name string
	grid [3]int
}

// newSimDevice returns a Device backed by the PTX interpreter, described as
// an sm_90 GPU with 227 KiB of shared memory per block.
func newSimDevice() *Device {
	return newDevice(&sim{m: ptxsim.New()}, Info{Name: "ptxsim", Major: 9, SMs: 1, MaxSharedPerBlock: 227 << 10})
}

func (s *sim) Alloc(n int) (cuda.Ptr, error) {
	p, err := s.m.Alloc(n)
	return cuda.Ptr(p), err
}
func (s *sim) Free(p cuda.Ptr) error { return s.m.Free(uint64(p)) }
func (s *sim) CopyInAsync(dst cuda.Ptr, src unsafe.Pointer, n int, _ cuda.Stream) error {
	return s.m.Write(uint64(dst), unsafe.Slice((*byte)(src), n))
}
func (s *sim) CopyOut(dst unsafe.Pointer, src cuda.Ptr, n int) error {
	return s.m.Read(uint64(src), unsafe.Slice((*byte)(dst), n))
}
func (s *sim) ZeroAsync(p cuda.Ptr, n int, _ cuda.Stream) error { return s.m.Zero(uint64(p), n) }
func (s *sim) LoadModule(ptx []byte) (cuda.Module, error) {
	text := string(ptx)
	if s.mutate != nil {
		text = s.mutate(text)
	}
	m, err := ptxsim.Parse(text)
	if err != nil {
		return 0, err
	}
	s.modules = append(s.modules, m)
	return cuda.Module(len(s.modules)), nil
}
func (s *sim) Unload(m cuda.Module) error { return nil }
func (s *sim) Function(m cuda.Module, name string, maxSmem int) (cuda.Function, error) {
	k, err := s.modules[m-1].Kernel(name)
	if err != nil {
		return 0, err
	}
	s.kernels = append(s.kernels, k)
	return cuda.Function(len(s.kernels)), nil
}
func (s *sim) Launch(f cuda.Function, grid, block [3]uint32, smem int, args []cuda.Arg, _ cuda.Stream) error {
	if err := s.fail; err != nil {
		s.fail = nil
		return err
	}
	if block[1] != 1 || block[2] != 1 {
		return fmt.Errorf("sim: block %v", block)
	}
	k := s.kernels[f-1]
	s.log = append(s.log, launch{k.Name, [3]int{int(grid[0]), int(grid[1]), int(grid[2])}})
	bits := make([]uint64, len(args))
	for i, a := range args {
		bits[i] = a.Bits
	}
	return s.m.Launch(k, [3]int{int(grid[0]), int(grid[1]), int(grid[2])}, int(block[0]), smem, bits)
}
func (s *sim) NewStream() (cuda.Stream, error) {
	s.streams++
	return cuda.Stream(s.streams), nil
}
func (s *sim) DestroyStream(cuda.Stream) error { return nil }
func (s *sim) SyncStream(cuda.Stream) error    { return nil }
func (s *sim) Synchronize() error              { return nil }
func (s *sim) Close() error                    { return nil }

// simForward runs one bf16 forward on a fresh interpreter device and
// returns O, LSE and the lane executions per opcode (ptxsim's Counts).
// With del set, every match of it is deleted from the modules' text first;
// it is an error if del matches nothing.
func simForward(q, k, v flashattn.Tensor, opts *Options, del *regexp.Regexp) (out, lse []float32, counts map[string]int64, err error) {
	d := newSimDevice()
	defer d.Close()
	s := d.ctx.backend.(*sim)
	s.m.Counts = map[string]int64{}
	removed := 0
	if del != nil {
		s.mutate = func(text string) string {
			removed += len(del.FindAllString(text, -1))
			return del.ReplaceAllString(text, "")
		}
	}
	o, l, err := d.ForwardHost(BF16, q, k, v, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	if del != nil && removed == 0 {
		return nil, nil, nil, fmt.Errorf("%v matches nothing in the modules", del)
	}
	return o.Data, l, s.m.Counts, nil
}
