package kernel

// The arm64 kernels (kernel_arm64.s, kernel_arm64_stubs.go) are generated
// by the program in ./_arm64, a module of its own like ./_asm.
//go:generate sh -c "cd _arm64 && go run . -out ../kernel_arm64.s -stubs ../kernel_arm64_stubs.go"
