// Package tile holds the layout decisions of flashattn's GPU kernels as plain
// Go functions: which matrix element each thread's registers hold for the
// tensor-core instructions (mma.sync.m16n8k16 and ldmatrix, as documented in
// NVIDIA's PTX ISA), how tiles are laid out in shared memory, which tiles a
// mask lets a thread block visit, and the launch geometry.
//
// The PTX generator (gpu/_ptxgen) emits index arithmetic that follows these
// functions, and the gpu package uses them to size and launch the kernels;
// the tests here simulate the fragment layouts on the host and check that the
// products the kernels form through them equal direct matrix products.
package tile
