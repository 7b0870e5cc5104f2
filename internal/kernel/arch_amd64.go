package kernel

// On amd64 the dispatch lives in impl_amd64.go, next to the wrappers of the
// generated assembly (kernel_amd64.s, built from ./_asm).
