package kernel

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// goldenRaw holds, for every instruction that kernel_amd64.s and
// decode_bf16_amd64.s spell as
// BYTE directives (the Go assembler does not know VDPBF16PS,
// VCVTNEPS2BF16 or the AMX tile instructions), the encoding GNU as 2.40
// produces for it. The table was made by assembling the comment texts,
//
//	grep -o '// raw: .*' kernel_amd64.s decode_bf16_amd64.s | sed 's|// raw: ||' | sort -u
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
	"vcvtneps2bf16 ymm0,zmm0":     "62 f2 7e 48 72 c0",
	"vcvtneps2bf16 ymm1,zmm0":     "62 f2 7e 48 72 c8",
	"vcvtneps2bf16 ymm1,zmm1":     "62 f2 7e 48 72 c9",
	"vcvtneps2bf16 ymm2,zmm2":     "62 f2 7e 48 72 d2",
	"vcvtneps2bf16 ymm28,zmm28":   "62 02 7e 48 72 e4",
	"vcvtneps2bf16 ymm3,zmm3":     "62 f2 7e 48 72 db",
	"vcvtneps2bf16 ymm4,zmm4":     "62 f2 7e 48 72 e4",
	"vcvtneps2bf16 ymm5,zmm5":     "62 f2 7e 48 72 ed",
	"vcvtneps2bf16 ymm6,zmm6":     "62 f2 7e 48 72 f6",
	"vcvtneps2bf16 ymm7,zmm7":     "62 f2 7e 48 72 ff",
	"vdpbf16ps ymm0,ymm16,ymm18":  "62 b2 7e 20 52 c2",
	"vdpbf16ps ymm0,ymm16,ymm20":  "62 b2 7e 20 52 c4",
	"vdpbf16ps ymm0,ymm16,ymm22":  "62 b2 7e 20 52 c6",
	"vdpbf16ps ymm0,ymm8,ymm10":   "62 d2 3e 28 52 c2",
	"vdpbf16ps ymm1,ymm16,ymm19":  "62 b2 7e 20 52 cb",
	"vdpbf16ps ymm1,ymm16,ymm21":  "62 b2 7e 20 52 cd",
	"vdpbf16ps ymm1,ymm16,ymm23":  "62 b2 7e 20 52 cf",
	"vdpbf16ps ymm1,ymm9,ymm11":   "62 d2 36 28 52 cb",
	"vdpbf16ps ymm10,ymm17,ymm18": "62 32 76 20 52 d2",
	"vdpbf16ps ymm10,ymm17,ymm20": "62 32 76 20 52 d4",
	"vdpbf16ps ymm10,ymm17,ymm22": "62 32 76 20 52 d6",
	"vdpbf16ps ymm11,ymm17,ymm19": "62 32 76 20 52 db",
	"vdpbf16ps ymm11,ymm17,ymm21": "62 32 76 20 52 dd",
	"vdpbf16ps ymm11,ymm17,ymm23": "62 32 76 20 52 df",
	"vdpbf16ps ymm12,ymm17,ymm18": "62 32 76 20 52 e2",
	"vdpbf16ps ymm12,ymm17,ymm20": "62 32 76 20 52 e4",
	"vdpbf16ps ymm12,ymm17,ymm22": "62 32 76 20 52 e6",
	"vdpbf16ps ymm13,ymm17,ymm19": "62 32 76 20 52 eb",
	"vdpbf16ps ymm13,ymm17,ymm21": "62 32 76 20 52 ed",
	"vdpbf16ps ymm13,ymm17,ymm23": "62 32 76 20 52 ef",
	"vdpbf16ps ymm14,ymm17,ymm18": "62 32 76 20 52 f2",
	"vdpbf16ps ymm14,ymm17,ymm20": "62 32 76 20 52 f4",
	"vdpbf16ps ymm14,ymm17,ymm22": "62 32 76 20 52 f6",
	"vdpbf16ps ymm15,ymm17,ymm19": "62 32 76 20 52 fb",
	"vdpbf16ps ymm15,ymm17,ymm21": "62 32 76 20 52 fd",
	"vdpbf16ps ymm15,ymm17,ymm23": "62 32 76 20 52 ff",
	"vdpbf16ps ymm2,ymm16,ymm18":  "62 b2 7e 20 52 d2",
	"vdpbf16ps ymm2,ymm16,ymm20":  "62 b2 7e 20 52 d4",
	"vdpbf16ps ymm2,ymm16,ymm22":  "62 b2 7e 20 52 d6",
	"vdpbf16ps ymm3,ymm16,ymm19":  "62 b2 7e 20 52 db",
	"vdpbf16ps ymm3,ymm16,ymm21":  "62 b2 7e 20 52 dd",
	"vdpbf16ps ymm3,ymm16,ymm23":  "62 b2 7e 20 52 df",
	"vdpbf16ps ymm4,ymm16,ymm18":  "62 b2 7e 20 52 e2",
	"vdpbf16ps ymm4,ymm16,ymm20":  "62 b2 7e 20 52 e4",
	"vdpbf16ps ymm4,ymm16,ymm22":  "62 b2 7e 20 52 e6",
	"vdpbf16ps ymm5,ymm16,ymm19":  "62 b2 7e 20 52 eb",
	"vdpbf16ps ymm5,ymm16,ymm21":  "62 b2 7e 20 52 ed",
	"vdpbf16ps ymm5,ymm16,ymm23":  "62 b2 7e 20 52 ef",
	"vdpbf16ps ymm6,ymm16,ymm18":  "62 b2 7e 20 52 f2",
	"vdpbf16ps ymm6,ymm16,ymm20":  "62 b2 7e 20 52 f4",
	"vdpbf16ps ymm6,ymm16,ymm22":  "62 b2 7e 20 52 f6",
	"vdpbf16ps ymm7,ymm16,ymm19":  "62 b2 7e 20 52 fb",
	"vdpbf16ps ymm7,ymm16,ymm21":  "62 b2 7e 20 52 fd",
	"vdpbf16ps ymm7,ymm16,ymm23":  "62 b2 7e 20 52 ff",
	"vdpbf16ps ymm8,ymm17,ymm18":  "62 32 76 20 52 c2",
	"vdpbf16ps ymm8,ymm17,ymm20":  "62 32 76 20 52 c4",
	"vdpbf16ps ymm8,ymm17,ymm22":  "62 32 76 20 52 c6",
	"vdpbf16ps ymm9,ymm17,ymm19":  "62 32 76 20 52 cb",
	"vdpbf16ps ymm9,ymm17,ymm21":  "62 32 76 20 52 cd",
	"vdpbf16ps ymm9,ymm17,ymm23":  "62 32 76 20 52 cf",
	"vdpbf16ps zmm0,zmm12,zmm13":  "62 d2 1e 48 52 c5",
	"vdpbf16ps zmm0,zmm14,zmm12":  "62 d2 0e 48 52 c4",
	"vdpbf16ps zmm0,zmm16,zmm18":  "62 b2 7e 40 52 c2",
	"vdpbf16ps zmm0,zmm16,zmm20":  "62 b2 7e 40 52 c4",
	"vdpbf16ps zmm0,zmm16,zmm22":  "62 b2 7e 40 52 c6",
	"vdpbf16ps zmm0,zmm18,zmm20":  "62 b2 6e 40 52 c4",
	"vdpbf16ps zmm0,zmm8,zmm10":   "62 d2 3e 48 52 c2",
	"vdpbf16ps zmm1,zmm12,zmm13":  "62 d2 1e 48 52 cd",
	"vdpbf16ps zmm1,zmm14,zmm13":  "62 d2 0e 48 52 cd",
	"vdpbf16ps zmm1,zmm16,zmm19":  "62 b2 7e 40 52 cb",
	"vdpbf16ps zmm1,zmm16,zmm21":  "62 b2 7e 40 52 cd",
	"vdpbf16ps zmm1,zmm16,zmm23":  "62 b2 7e 40 52 cf",
	"vdpbf16ps zmm1,zmm19,zmm20":  "62 b2 66 40 52 cc",
	"vdpbf16ps zmm1,zmm9,zmm11":   "62 d2 36 48 52 cb",
	"vdpbf16ps zmm10,zmm12,zmm13": "62 52 1e 48 52 d5",
	"vdpbf16ps zmm10,zmm17,zmm18": "62 32 76 40 52 d2",
	"vdpbf16ps zmm10,zmm17,zmm20": "62 32 76 40 52 d4",
	"vdpbf16ps zmm10,zmm17,zmm22": "62 32 76 40 52 d6",
	"vdpbf16ps zmm10,zmm18,zmm25": "62 12 6e 40 52 d1",
	"vdpbf16ps zmm10,zmm19,zmm12": "62 52 66 40 52 d4",
	"vdpbf16ps zmm11,zmm12,zmm13": "62 52 1e 48 52 dd",
	"vdpbf16ps zmm11,zmm17,zmm19": "62 32 76 40 52 db",
	"vdpbf16ps zmm11,zmm17,zmm21": "62 32 76 40 52 dd",
	"vdpbf16ps zmm11,zmm17,zmm23": "62 32 76 40 52 df",
	"vdpbf16ps zmm11,zmm19,zmm13": "62 52 66 40 52 dd",
	"vdpbf16ps zmm11,zmm19,zmm25": "62 12 66 40 52 d9",
	"vdpbf16ps zmm12,zmm17,zmm18": "62 32 76 40 52 e2",
	"vdpbf16ps zmm12,zmm17,zmm20": "62 32 76 40 52 e4",
	"vdpbf16ps zmm12,zmm17,zmm22": "62 32 76 40 52 e6",
	"vdpbf16ps zmm12,zmm18,zmm26": "62 12 6e 40 52 e2",
	"vdpbf16ps zmm13,zmm17,zmm19": "62 32 76 40 52 eb",
	"vdpbf16ps zmm13,zmm17,zmm21": "62 32 76 40 52 ed",
	"vdpbf16ps zmm13,zmm17,zmm23": "62 32 76 40 52 ef",
	"vdpbf16ps zmm13,zmm19,zmm26": "62 12 66 40 52 ea",
	"vdpbf16ps zmm14,zmm17,zmm18": "62 32 76 40 52 f2",
	"vdpbf16ps zmm14,zmm17,zmm20": "62 32 76 40 52 f4",
	"vdpbf16ps zmm14,zmm17,zmm22": "62 32 76 40 52 f6",
	"vdpbf16ps zmm14,zmm18,zmm27": "62 12 6e 40 52 f3",
	"vdpbf16ps zmm15,zmm17,zmm19": "62 32 76 40 52 fb",
	"vdpbf16ps zmm15,zmm17,zmm21": "62 32 76 40 52 fd",
	"vdpbf16ps zmm15,zmm17,zmm23": "62 32 76 40 52 ff",
	"vdpbf16ps zmm15,zmm19,zmm27": "62 12 66 40 52 fb",
	"vdpbf16ps zmm2,zmm12,zmm13":  "62 d2 1e 48 52 d5",
	"vdpbf16ps zmm2,zmm15,zmm12":  "62 d2 06 48 52 d4",
	"vdpbf16ps zmm2,zmm16,zmm18":  "62 b2 7e 40 52 d2",
	"vdpbf16ps zmm2,zmm16,zmm20":  "62 b2 7e 40 52 d4",
	"vdpbf16ps zmm2,zmm16,zmm22":  "62 b2 7e 40 52 d6",
	"vdpbf16ps zmm2,zmm18,zmm21":  "62 b2 6e 40 52 d5",
	"vdpbf16ps zmm3,zmm12,zmm13":  "62 d2 1e 48 52 dd",
	"vdpbf16ps zmm3,zmm15,zmm13":  "62 d2 06 48 52 dd",
	"vdpbf16ps zmm3,zmm16,zmm19":  "62 b2 7e 40 52 db",
	"vdpbf16ps zmm3,zmm16,zmm21":  "62 b2 7e 40 52 dd",
	"vdpbf16ps zmm3,zmm16,zmm23":  "62 b2 7e 40 52 df",
	"vdpbf16ps zmm3,zmm19,zmm21":  "62 b2 66 40 52 dd",
	"vdpbf16ps zmm4,zmm12,zmm13":  "62 d2 1e 48 52 e5",
	"vdpbf16ps zmm4,zmm16,zmm12":  "62 d2 7e 40 52 e4",
	"vdpbf16ps zmm4,zmm16,zmm18":  "62 b2 7e 40 52 e2",
	"vdpbf16ps zmm4,zmm16,zmm20":  "62 b2 7e 40 52 e4",
	"vdpbf16ps zmm4,zmm16,zmm22":  "62 b2 7e 40 52 e6",
	"vdpbf16ps zmm4,zmm18,zmm22":  "62 b2 6e 40 52 e6",
	"vdpbf16ps zmm5,zmm12,zmm13":  "62 d2 1e 48 52 ed",
	"vdpbf16ps zmm5,zmm16,zmm13":  "62 d2 7e 40 52 ed",
	"vdpbf16ps zmm5,zmm16,zmm19":  "62 b2 7e 40 52 eb",
	"vdpbf16ps zmm5,zmm16,zmm21":  "62 b2 7e 40 52 ed",
	"vdpbf16ps zmm5,zmm16,zmm23":  "62 b2 7e 40 52 ef",
	"vdpbf16ps zmm5,zmm19,zmm22":  "62 b2 66 40 52 ee",
	"vdpbf16ps zmm6,zmm12,zmm13":  "62 d2 1e 48 52 f5",
	"vdpbf16ps zmm6,zmm16,zmm18":  "62 b2 7e 40 52 f2",
	"vdpbf16ps zmm6,zmm16,zmm20":  "62 b2 7e 40 52 f4",
	"vdpbf16ps zmm6,zmm16,zmm22":  "62 b2 7e 40 52 f6",
	"vdpbf16ps zmm6,zmm17,zmm12":  "62 d2 76 40 52 f4",
	"vdpbf16ps zmm6,zmm18,zmm23":  "62 b2 6e 40 52 f7",
	"vdpbf16ps zmm7,zmm12,zmm13":  "62 d2 1e 48 52 fd",
	"vdpbf16ps zmm7,zmm16,zmm19":  "62 b2 7e 40 52 fb",
	"vdpbf16ps zmm7,zmm16,zmm21":  "62 b2 7e 40 52 fd",
	"vdpbf16ps zmm7,zmm16,zmm23":  "62 b2 7e 40 52 ff",
	"vdpbf16ps zmm7,zmm17,zmm13":  "62 d2 76 40 52 fd",
	"vdpbf16ps zmm7,zmm19,zmm23":  "62 b2 66 40 52 ff",
	"vdpbf16ps zmm8,zmm12,zmm13":  "62 52 1e 48 52 c5",
	"vdpbf16ps zmm8,zmm17,zmm18":  "62 32 76 40 52 c2",
	"vdpbf16ps zmm8,zmm17,zmm20":  "62 32 76 40 52 c4",
	"vdpbf16ps zmm8,zmm17,zmm22":  "62 32 76 40 52 c6",
	"vdpbf16ps zmm8,zmm18,zmm12":  "62 52 6e 40 52 c4",
	"vdpbf16ps zmm8,zmm18,zmm24":  "62 12 6e 40 52 c0",
	"vdpbf16ps zmm9,zmm12,zmm13":  "62 52 1e 48 52 cd",
	"vdpbf16ps zmm9,zmm17,zmm19":  "62 32 76 40 52 cb",
	"vdpbf16ps zmm9,zmm17,zmm21":  "62 32 76 40 52 cd",
	"vdpbf16ps zmm9,zmm17,zmm23":  "62 32 76 40 52 cf",
	"vdpbf16ps zmm9,zmm18,zmm13":  "62 52 6e 40 52 cd",
	"vdpbf16ps zmm9,zmm19,zmm24":  "62 12 66 40 52 c8",
}

// TestRawEncodings reads the generated assembly and checks that every
// "// raw: <instruction>" comment is followed by exactly the golden bytes
// of that instruction, so the encoder of the generator, the comment and
// the code cannot drift apart.
func TestRawEncodings(t *testing.T) {
	seen := map[string]bool{}
	for _, file := range rawFiles {
		checkRawEncodings(t, file, seen)
	}
	if len(seen) != len(goldenRaw) {
		t.Errorf("the assembly uses %d distinct raw instructions, the golden table has %d", len(seen), len(goldenRaw))
	}
}

// rawFiles are the generated files with raw instructions.
var rawFiles = []string{"kernel_amd64.s", "decode_bf16_amd64.s"}

// checkRawEncodings checks the raw instructions of one file, adding their
// texts to seen.
func checkRawEncodings(t *testing.T, file string, seen map[string]bool) {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var text string
	var code []string
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
}
