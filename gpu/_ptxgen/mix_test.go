package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// TestInstructionMix logs, for each attention kernel of the committed PTX
// (or of the directory PTXDIR), the instructions of one main-loop
// iteration by kind: a static count of the loop body (the common path:
// no mask, no softcap, whole tiles), the basis of the estimates in the
// README. It asserts that every attention kernel has a loop, and that a
// split-KV forward kernel whose configuration is the forward's (d256) has
// the forward's main loop: splitting changes the key range and the
// epilogue, not the loop.
func TestInstructionMix(t *testing.T) {
	dir := os.Getenv("PTXDIR")
	if dir == "" {
		dir = "../ptx"
	}
	files, _ := filepath.Glob(filepath.Join(dir, "attn_bf16_*.ptx"))
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "kernel\tmma\tldmatrix\tmma/ldmatrix\tcp.async\tbar.sync\tred\tst.global\tother\ttotal\t")
	mixes := map[string]map[string]int{}
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range loopMixes(string(text), false) {
			mixes[k.name] = k.mix
			small := strings.HasPrefix(k.name, "conv") || strings.HasPrefix(k.name, "bwdpre") || strings.HasPrefix(k.name, "fwdcombine")
			if k.mix == nil && !small {
				t.Errorf("%s: no main loop found", k.name)
			}
			if k.mix == nil || small {
				continue
			}
			m := k.mix
			other := m["total"] - m["mma"] - m["ldmatrix"] - m["cp.async"] - m["bar.sync"] - m["red"] - m["st.global"]
			fmt.Fprintf(w, "%s\t%d\t%d\t%.2f\t%d\t%d\t%d\t%d\t%d\t%d\t\n", k.name, m["mma"], m["ldmatrix"], float64(m["mma"])/float64(max(1, m["ldmatrix"])),
				m["cp.async"], m["bar.sync"], m["red"], m["st.global"], other, m["total"])
		}
	}
	w.Flush()
	checkSplitLoops(t, mixes)
	t.Logf("one main-loop iteration, per thread (common path: skips the mask and softcap branches and the partial-copy path):\n%s", b.String())
}

// checkSplitLoops checks that each split-KV forward kernel whose
// configuration equals the forward's has the forward's loop mix.
func checkSplitLoops(t *testing.T, mixes map[string]map[string]int) {
	same := 0
	for _, d := range tile.HeadDims {
		fc, sc := tile.FwdConfig(d), tile.FwdSplitConfig(d)
		sc.Split = false
		if fc != sc {
			continue
		}
		sc.Split = true
		fm, sm := mixes[fc.Name("bf16")], mixes[sc.Name("bf16")]
		if fm == nil || sm == nil {
			continue // another PTXDIR
		}
		same++
		if fmt.Sprint(fm) != fmt.Sprint(sm) {
			t.Errorf("d%d: the split kernel's loop %v differs from the forward's %v", d, sm, fm)
		}
	}
	if same == 0 && len(mixes) > 0 {
		t.Error("no split-KV kernel shares the forward's configuration: the check is vacuous")
	}
}

type kernelMix struct {
	name string
	mix  map[string]int
}

var (
	entryLine = regexp.MustCompile(`^\.visible \.entry (\w+)\(`)
	loopLabel = regexp.MustCompile(`^(\$L_loop_\d+):$`)
)

// loopMixes counts, per kernel, the instructions between its first loop
// label and the branch back to it, leaving out the blocks that uniform
// branches skip on the common path (mask, softcap, partial copies); with
// skipRescale, also the forward's O rescale (the path of a key tile where no
// row of the warp got a new max).
func loopMixes(text string, skipRescale bool) []kernelMix {
	var out []kernelMix
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		m := entryLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		k := kernelMix{name: m[1]}
		j := i
		for ; j < len(lines) && lines[j] != "}"; j++ {
			if l := loopLabel.FindStringSubmatch(lines[j]); l != nil {
				k.mix = countLoop(lines[j+1:], l[1], skipRescale)
				break
			}
		}
		out = append(out, k)
		i = j
	}
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	return out
}

// countLoop counts the instructions of lines up to the branch back to
// label: per kind (mix keys "mma", "ldmatrix", "cp.async", "bar.sync",
// "red", "st.global", "total") and, for the estimates, "mufu" (ex2, lg2,
// rcp: the special-function unit), "copy" (cp.async copies, without
// commits and waits) and "smem bytes" (per lane, of ld/st.shared).
func countLoop(lines []string, label string, skipRescale bool) map[string]int {
	mix := map[string]int{}
	skipTo := "" // inside a skipped block: until this label
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if strings.HasSuffix(l, ":") {
			if strings.TrimSuffix(l, ":") == skipTo {
				skipTo = ""
			}
			continue
		}
		if l == "" || strings.HasPrefix(l, "//") || skipTo != "" {
			continue
		}
		f := strings.Fields(strings.TrimSuffix(l, ";"))
		op := f[0]
		if strings.HasPrefix(op, "@") {
			op = f[1]
		}
		if strings.HasPrefix(op, "bra") {
			target := f[len(f)-1]
			if target == label {
				return mix
			}
			// Uniform branches around the mask, the softcap, the partial
			// copy path: the common path takes the skip (a whole tile,
			// no softcap) and the unconditional branch over the partial
			// path; the prefetch branch is taken only on the last block.
			if strings.Contains(target, "nomask") || strings.Contains(target, "scored") || strings.Contains(target, "copied") || strings.Contains(target, "pgdone") ||
				skipRescale && strings.Contains(target, "rescaled") {
				skipTo = target
			}
			mix["total"]++
			continue
		}
		mix["total"]++
		for _, kind := range []string{"mma", "ldmatrix", "cp.async", "bar.sync", "red", "st.global"} {
			if strings.HasPrefix(op, kind) {
				mix[kind]++
			}
		}
		switch {
		case strings.HasPrefix(op, "ex2") || strings.HasPrefix(op, "lg2") || strings.HasPrefix(op, "rcp"):
			mix["mufu"]++
		case strings.HasPrefix(op, "cp.async.c"):
			mix["copy"]++
		case strings.HasPrefix(op, "ld.shared") || strings.HasPrefix(op, "st.shared"):
			mix["smem bytes"] += sharedBytes(op)
		}
	}
	return nil
}

// sharedBytes is the bytes per lane of an ld/st.shared opcode
// (st.shared.v2.f32: 8).
func sharedBytes(op string) int {
	n := 4
	if strings.HasSuffix(op, "16") {
		n = 2
	} else if strings.HasSuffix(op, "64") {
		n = 8
	}
	switch {
	case strings.Contains(op, ".v2."):
		n *= 2
	case strings.Contains(op, ".v4."):
		n *= 4
	}
	return n
}
