package kernel

// The decode kernels (decode_amd64.s, decode_amd64_stubs.go) are generated
// by the same avo program as the others, with -decode (see _asm/decode*.go).
//go:generate sh -c "cd _asm && go run . -decode -out ../decode_amd64.s -stubs ../decode_amd64_stubs.go -pkg kernel"
