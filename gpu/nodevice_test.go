package gpu

import (
	"errors"
	"fmt"
	"testing"

	"github.com/flashattn/flashattn"
)

// Without a device — the nil *Device a failed Open returns, a zero Device,
// a nil or zero Stream or Buffer — every method returns an error wrapping
// ErrNoDevice (Info an empty Info, Len 0, Buffer.Free nothing to do), and
// never panics; a bad argument is still the *flashattn.ArgError a device
// would report, with the root package's message. Before, each of these
// dereferenced a nil pointer.
func TestNoDeviceEntries(t *testing.T) {
	var nd *Device
	var zd Device
	var ns *Stream
	var zs Stream
	var nb *Buffer
	var zb Buffer
	sim := newSimDevice()
	defer sim.Close()
	st, err := sim.NewTensor(BF16, 1, 4, 2, 64) // a real buffer, of another device
	if err != nil {
		t.Fatal(err)
	}
	lse, err := sim.Alloc(4 * 2 * 4)
	if err != nil {
		t.Fatal(err)
	}
	var outs [3]Tensor // out, or dq, dk and dv
	for i := range outs {
		if outs[i], err = sim.NewTensor(BF16, 1, 4, 2, 64); err != nil {
			t.Fatal(err)
		}
	}
	so := outs[0]
	x := flashattn.NewTensor(1, 4, 2, 64)
	host := make([]float32, 8)
	fwdHost := func(d *Device) func() error {
		return func() error { _, _, err := d.ForwardHost(BF16, x, x, x, nil); return err }
	}
	bwdHost := func(d *Device) func() error {
		return func() error { _, _, _, err := d.BackwardHost(F16, x, x, x, x, x, host, nil); return err }
	}
	for _, d := range []struct {
		name string
		d    *Device
	}{{"nil Device", nd}, {"zero Device", &zd}} {
		for _, c := range []struct {
			name string
			call func() error
		}{
			{"Close", d.d.Close},
			{"Synchronize", d.d.Synchronize},
			{"Alloc", func() error { _, err := d.d.Alloc(16); return err }},
			{"NewTensor", func() error { _, err := d.d.NewTensor(BF16, 1, 4, 2, 64); return err }},
			{"NewStream", func() error { _, err := d.d.NewStream(); return err }},
			{"ForwardHost", fwdHost(d.d)},
			{"BackwardHost", bwdHost(d.d)},
			{"Forward", func() error { return d.d.Forward(st, st, st, so, lse, nil) }},
			{"Backward", func() error { return d.d.Backward(st, st, st, st, st, lse, outs[0], outs[1], outs[2], nil) }},
			{"Info", func() error {
				if i := d.d.Info(); i != (Info{}) {
					return fmt.Errorf("Info %+v", i)
				}
				return ErrNoDevice
			}},
		} {
			noDevice(t, d.name+"."+c.name, c.call)
		}
	}
	for _, s := range []struct {
		name string
		s    *Stream
	}{{"nil Stream", ns}, {"zero Stream", &zs}} {
		noDevice(t, s.name+".Close", s.s.Close)
		noDevice(t, s.name+".Synchronize", s.s.Synchronize)
		noDevice(t, s.name+".Forward", func() error { return s.s.Forward(st, st, st, so, lse, nil) })
		noDevice(t, s.name+".Backward", func() error { return s.s.Backward(st, st, st, st, st, lse, outs[0], outs[1], outs[2], nil) })
	}
	for _, b := range []struct {
		name string
		b    *Buffer
	}{{"nil Buffer", nb}, {"zero Buffer", &zb}} {
		if err := catch(b.b.Free); err != nil {
			t.Errorf("%s.Free: %v, want nil (nothing to free)", b.name, err)
		}
		if err := catch(func() error { return fmt.Errorf("Len %d", b.b.Len()) }); err.Error() != "Len 0" {
			t.Errorf("%s.Len: %v, want 0", b.name, err)
		}
	}
	// Argument errors come first, as package flashattn words them.
	bad := &Options{Options: flashattn.Options{Scale: -1}}
	_, _, want := flashattn.Forward(x, x, x, &bad.Options)
	for _, d := range []*Device{nd, &zd} {
		_, _, err := d.ForwardHost(BF16, x, x, x, bad)
		var ae *flashattn.ArgError
		if !errors.As(err, &ae) || err.Error() != want.Error() {
			t.Errorf("ForwardHost with Scale -1 and no device: %v, want %v", err, want)
		}
		if err := catch(func() error { return d.Forward(Tensor{}, st, st, so, lse, nil) }); !errors.As(err, &ae) || ae.Arg != "q" {
			t.Errorf("Forward with no q and no device: %v, want an *ArgError for q", err)
		}
	}
}

// noDevice checks that call returns an error wrapping ErrNoDevice.
func noDevice(t *testing.T, name string, call func() error) {
	t.Helper()
	if err := catch(call); !errors.Is(err, ErrNoDevice) {
		t.Errorf("%s: %v, want an error wrapping ErrNoDevice", name, err)
	}
}

// catch runs call and returns its error, or its panic as an error.
func catch(call func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return call()
}
