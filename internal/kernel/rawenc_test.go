package kernel

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// goldenRaw holds, for every instruction that kernel_amd64.s spells as
// BYTE directives (the Go assembler does not know VDPBF16PS,
// VCVTNEPS2BF16 or the AMX tile instructions), the encoding GNU as 2.40
// produces for it. The table was made by assembling the comment texts,
//
//	grep -o '// raw: .*' kernel_amd64.s | sed 's|// raw: ||' | sort -u
//	(as Intel syntax, .intel_syntax noprefix) | as -o t.o && objdump -d -M intel t.o
//
// and objdump printed each text back unchanged. A new register or memory
// combination in the generator fails TestRawEncodings until its golden
// bytes are added here the same way.
var goldenRaw = map[string]string{
	"ldtilecfg [rax]":             "c4 e2 78 49 00",
	"tdpbf16ps tmm0,tmm1,tmm2":    "c4 e2 6a 5c c1",
	"tdpbf16ps tmm0,tmm3,tmm4":    "c4 e2 5a 5c c3",
	"tdpbf16ps tmm0,tmm4,tmm6":    "c4 e2 4a 5c c4",
	"tdpbf16ps tmm1,tmm4,tmm7":    "c4 e2 42 5c cc",
	"tdpbf16ps tmm2,tmm5,tmm6":    "c4 e2 4a 5c d5",
	"tdpbf16ps tmm3,tmm5,tmm7":    "c4 e2 42 5c dd",
	"tdpfp16ps tmm0,tmm1,tmm2":    "c4 e2 6b 5c c1",
	"tdpfp16ps tmm0,tmm3,tmm4":    "c4 e2 5b 5c c3",
	"tdpfp16ps tmm0,tmm4,tmm6":    "c4 e2 4b 5c c4",
	"tdpfp16ps tmm1,tmm4,tmm7":    "c4 e2 43 5c cc",
	"tdpfp16ps tmm2,tmm5,tmm6":    "c4 e2 4b 5c d5",
	"tdpfp16ps tmm3,tmm5,tmm7":    "c4 e2 43 5c dd",
	"tileloadd tmm0,[r9+r10*1]":   "c4 82 7b 4b 04 11",
	"tileloadd tmm1,[rsi+rdx*1]":  "c4 e2 7b 4b 0c 16",
	"tileloadd tmm2,[rdi+rcx*1]":  "c4 e2 7b 4b 14 0f",
	"tileloadd tmm3,[rsi+rdx*1]":  "c4 e2 7b 4b 1c 16",
	"tileloadd tmm4,[rdi+rcx*1]":  "c4 e2 7b 4b 24 0f",
	"tilerelease":                 "c4 e2 78 49 c0",
	"tilestored [r9+r10*1],tmm0":  "c4 82 7a 4b 04 11",
	"tilezero tmm0":               "c4 e2 7b 49 c0",
	"tilezero tmm1":               "c4 e2 7b 49 c8",
	"tilezero tmm2":               "c4 e2 7b 49 d0",
	"tilezero tmm3":               "c4 e2 7b 49 d8",
	"tilezero tmm4":               "c4 e2 7b 49 e0",
	"tilezero tmm5":               "c4 e2 7b 49 e8",
	"tilezero tmm6":               "c4 e2 7b 49 f0",
	"tilezero tmm7":               "c4 e2 7b 49 f8",
	"vcvtneps2bf16 ymm1,zmm0":     "62 f2 7e 48 72 c8",
	"vdpbf16ps zmm0,zmm12,zmm13":  "62 d2 1e 48 52 c5",
	"vdpbf16ps zmm0,zmm14,zmm12":  "62 d2 0e 48 52 c4",
	"vdpbf16ps zmm1,zmm12,zmm13":  "62 d2 1e 48 52 cd",
	"vdpbf16ps zmm1,zmm14,zmm13":  "62 d2 0e 48 52 cd",
	"vdpbf16ps zmm10,zmm12,zmm13": "62 52 1e 48 52 d5",
	"vdpbf16ps zmm10,zmm19,zmm12": "62 52 66 40 52 d4",
	"vdpbf16ps zmm11,zmm12,zmm13": "62 52 1e 48 52 dd",
	"vdpbf16ps zmm11,zmm19,zmm13": "62 52 66 40 52 dd",
	"vdpbf16ps zmm2,zmm12,zmm13":  "62 d2 1e 48 52 d5",
	"vdpbf16ps zmm2,zmm15,zmm12":  "62 d2 06 48 52 d4",
	"vdpbf16ps zmm3,zmm12,zmm13":  "62 d2 1e 48 52 dd",
	"vdpbf16ps zmm3,zmm15,zmm13":  "62 d2 06 48 52 dd",
	"vdpbf16ps zmm4,zmm12,zmm13":  "62 d2 1e 48 52 e5",
	"vdpbf16ps zmm4,zmm16,zmm12":  "62 d2 7e 40 52 e4",
	"vdpbf16ps zmm5,zmm12,zmm13":  "62 d2 1e 48 52 ed",
	"vdpbf16ps zmm5,zmm16,zmm13":  "62 d2 7e 40 52 ed",
	"vdpbf16ps zmm6,zmm12,zmm13":  "62 d2 1e 48 52 f5",
	"vdpbf16ps zmm6,zmm17,zmm12":  "62 d2 76 40 52 f4",
	"vdpbf16ps zmm7,zmm12,zmm13":  "62 d2 1e 48 52 fd",
	"vdpbf16ps zmm7,zmm17,zmm13":  "62 d2 76 40 52 fd",
	"vdpbf16ps zmm8,zmm12,zmm13":  "62 52 1e 48 52 c5",
	"vdpbf16ps zmm8,zmm18,zmm12":  "62 52 6e 40 52 c4",
	"vdpbf16ps zmm9,zmm12,zmm13":  "62 52 1e 48 52 cd",
	"vdpbf16ps zmm9,zmm18,zmm13":  "62 52 6e 40 52 cd",
}

// TestRawEncodings reads the generated assembly and checks that every
// "// raw: <instruction>" comment is followed by exactly the golden bytes
// of that instruction, so the encoder of the generator, the comment and
// the code cannot drift apart.
func TestRawEncodings(t *testing.T) {
	f, err := os.Open("kernel_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var text string
	var code []string
	seen := map[string]bool{}
	flush := func() {
		if text == "" {
			return
		}
		want, ok := goldenRaw[text]
		if !ok {
			t.Errorf("no golden encoding for %q", text)
		} else if got := strings.Join(code, " "); got != want {
			t.Errorf("%s: bytes %s, want %s", text, got, want)
		}
		seen[text] = true
		text, code = "", nil
	}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "// raw: "):
			flush()
			text = strings.TrimPrefix(line, "// raw: ")
		case text != "" && strings.HasPrefix(line, "BYTE"):
			v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(line, "BYTE")), "$"), 0, 8)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			code = append(code, fmt.Sprintf("%02x", v))
		default:
			flush()
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(goldenRaw) {
		t.Errorf("the assembly uses %d distinct raw instructions, the golden table has %d", len(seen), len(goldenRaw))
	}
}
