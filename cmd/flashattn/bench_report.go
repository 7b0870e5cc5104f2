package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// benchResult is one line of the table and one JSON object. Every rate is
// summarised over the repetitions as its median, minimum and maximum;
// ratios (to the peak, speedups, to the bandwidths) are taken within each
// repetition and then summarised.
type benchResult struct {
	Mode    string `json:"mode"`
	Variant string `json:"variant"`
	// DType is the element type of flashattn's tensors: f32, bf16, f16, or
	// q8_0 (the cache of a decode case, read with float32 queries). The
	// plain algorithm is always float32.
	DType   string `json:"dtype"`
	Batch   int    `json:"batch"`
	Heads   int    `json:"heads"`
	KVHeads int    `json:"kv_heads"`
	SeqlenQ int    `json:"seqlen_q"`
	SeqlenK int    `json:"seqlen_k"`
	Headdim int    `json:"headdim"`
	// HeaddimV is V's head dim (O's and dO's too); Latent: a decode case
	// whose V is the first HeaddimV columns of K (an MLA latent cache).
	HeaddimV int  `json:"headdim_v"`
	Latent   bool `json:"latent_cache,omitempty"`
	Causal   bool `json:"causal"`
	// Density is the fraction of visible blocks of a block-sparse case.
	Density float64 `json:"density,omitempty"`
	Kernel  string  `json:"kernel"`
	Workers int     `json:"workers"`
	// Reps repetitions of Calls timed calls each (PlainCalls for plain).
	Reps       int `json:"reps"`
	Calls      int `json:"calls_per_rep"`
	PlainCalls int `json:"plain_calls_per_rep,omitempty"`

	Seconds      float64 `json:"seconds_median"` // per call
	FlopsPerCall float64 `json:"flops_per_call"` // what GFLOP/s count (see visibleFlops)
	GFlopsMedian float64 `json:"gflops_median"`
	GFlopsMin    float64 `json:"gflops_min"`
	GFlopsMax    float64 `json:"gflops_max"`

	// The FMA peak of the ISA the kernels ran with (PeakISA), measured
	// before every repetition on all workers; 0 when that path has none.
	PeakISA         string  `json:"peak_isa"`
	PeakMedian      float64 `json:"peak_median"`
	PeakMin         float64 `json:"peak_min"`
	PeakMax         float64 `json:"peak_max"`
	PeakRatioMedian float64 `json:"peak_ratio_median"`
	PeakRatioMin    float64 `json:"peak_ratio_min"`
	PeakRatioMax    float64 `json:"peak_ratio_max"`

	// bf16 and f16: the peak of the 16-bit product path the kernels use
	// (PeakHalfPath: "amx", "avx512bf16", "f32" or "generic"), measured
	// like the FMA peak before every repetition; the case's GFLOP/s as a
	// fraction of it; and that peak over the FP32 FMA peak.
	PeakHalfPath        string  `json:"peak_half_path,omitempty"`
	PeakHalfMedian      float64 `json:"peak_half_median,omitempty"`
	PeakHalfMin         float64 `json:"peak_half_min,omitempty"`
	PeakHalfMax         float64 `json:"peak_half_max,omitempty"`
	PeakHalfRatioMedian float64 `json:"peak_half_ratio_median,omitempty"`
	PeakHalfRatioMin    float64 `json:"peak_half_ratio_min,omitempty"`
	PeakHalfRatioMax    float64 `json:"peak_half_ratio_max,omitempty"`
	PeakHalfVsF32Median float64 `json:"peak_half_vs_f32_median,omitempty"`
	PeakHalfVsF32Min    float64 `json:"peak_half_vs_f32_min,omitempty"`
	PeakHalfVsF32Max    float64 `json:"peak_half_vs_f32_max,omitempty"`

	// Another type than f32: float32 flashattn on the same inputs, timed
	// in every repetition after the case, and the case's speedup over it
	// (its time over the case's).
	F32Calls         int     `json:"f32_calls_per_rep,omitempty"`
	F32GFlopsMedian  float64 `json:"f32_gflops_median,omitempty"`
	F32GFlopsMin     float64 `json:"f32_gflops_min,omitempty"`
	F32GFlopsMax     float64 `json:"f32_gflops_max,omitempty"`
	F32SpeedupMedian float64 `json:"f32_speedup_median,omitempty"`
	F32SpeedupMin    float64 `json:"f32_speedup_min,omitempty"`
	F32SpeedupMax    float64 `json:"f32_speedup_max,omitempty"`

	PlainGFlopsMedian float64 `json:"plain_gflops_median,omitempty"`
	PlainGFlopsMin    float64 `json:"plain_gflops_min,omitempty"`
	PlainGFlopsMax    float64 `json:"plain_gflops_max,omitempty"`
	SpeedupMedian     float64 `json:"speedup_median,omitempty"`
	SpeedupMin        float64 `json:"speedup_min,omitempty"`
	SpeedupMax        float64 `json:"speedup_max,omitempty"`
	PlainSkipped      string  `json:"plain_skipped,omitempty"`

	ExtraBytes uint64 `json:"extra_bytes"`

	// Plan is what the library chose on this machine: caches and tiles.
	Plan       benchPlan `json:"plan"`
	PlainBytes uint64    `json:"plain_extra_bytes,omitempty"`

	// Decode: the bytes the cache stores for the keys and values one call
	// reads (per DType: 4, 2, or 34/32 per value for q8_0); bytes of K
	// and V read per second; the read-only bandwidth and
	// the copy bandwidth (bytes read + written) of buffers of
	// BandwidthBytes each, well beyond the last-level cache (LLCBytes);
	// and the decode rate's ratio to each.
	KVBytesPerCall   uint64  `json:"kv_bytes_per_call,omitempty"`
	KVGBpsMedian     float64 `json:"kv_gbytes_per_s_median,omitempty"`
	KVGBpsMin        float64 `json:"kv_gbytes_per_s_min,omitempty"`
	KVGBpsMax        float64 `json:"kv_gbytes_per_s_max,omitempty"`
	ReadGBpsMedian   float64 `json:"read_gbytes_per_s_median,omitempty"`
	ReadGBpsMin      float64 `json:"read_gbytes_per_s_min,omitempty"`
	ReadGBpsMax      float64 `json:"read_gbytes_per_s_max,omitempty"`
	CopyGBpsMedian   float64 `json:"copy_gbytes_per_s_median,omitempty"`
	CopyGBpsMin      float64 `json:"copy_gbytes_per_s_min,omitempty"`
	CopyGBpsMax      float64 `json:"copy_gbytes_per_s_max,omitempty"`
	ReadRatioMedian  float64 `json:"read_ratio_median,omitempty"`
	ReadRatioMin     float64 `json:"read_ratio_min,omitempty"`
	ReadRatioMax     float64 `json:"read_ratio_max,omitempty"`
	CopyRatioMedian  float64 `json:"copy_ratio_median,omitempty"`
	CopyRatioMin     float64 `json:"copy_ratio_min,omitempty"`
	CopyRatioMax     float64 `json:"copy_ratio_max,omitempty"`
	BandwidthBytes   uint64  `json:"bandwidth_buffer_bytes,omitempty"`
	LLCBytes         uint64  `json:"llc_bytes,omitempty"`
	BandwidthSkipped string  `json:"bandwidth_skipped,omitempty"`

	// Decode: the bytes the cache stores per token (all KV heads), the
	// FLOPs per byte read (arithmetic intensity), and which resource
	// bounds the step: "compute" when that intensity exceeds the machine
	// balance — the peak of the product path of the case's type
	// (BoundPeak: the 16-bit path's for bf16 and f16, the FP32 FMA
	// peak's otherwise) over the read-only bandwidth, medians of the
	// run — and "memory" when it does not ("" when either was not
	// measured).
	KVBytesPerToken    float64 `json:"kv_bytes_per_token,omitempty"`
	FlopPerByte        float64 `json:"flop_per_byte,omitempty"`
	BalanceFlopPerByte float64 `json:"balance_flop_per_byte,omitempty"`
	BoundPeak          string  `json:"bound_peak,omitempty"`
	Bound              string  `json:"bound,omitempty"`
}

// setBound sets the decode roofline fields from the arithmetic intensity
// ai (FLOP per byte of cache read); half: the 16-bit product path's peak
// applies.
func (r *benchResult) setBound(ai float64, half bool) {
	r.FlopPerByte = ai
	peak := r.PeakMedian
	r.BoundPeak = "FMA peak of the " + r.PeakISA + " path"
	if half && r.PeakHalfMedian > 0 {
		peak, r.BoundPeak = r.PeakHalfMedian, r.DType+" peak of the "+r.PeakHalfPath+" path"
	}
	if peak <= 0 || r.ReadGBpsMedian <= 0 {
		r.BoundPeak = ""
		return
	}
	r.BalanceFlopPerByte = peak / r.ReadGBpsMedian
	r.Bound = "memory"
	if ai > r.BalanceFlopPerByte {
		r.Bound = "compute"
	}
}

// dv is V's head dim (results without the field: Headdim).
func (r benchResult) dv() int {
	if r.HeaddimV == 0 {
		return r.Headdim
	}
	return r.HeaddimV
}

func (r *benchResult) setGFlops(s spread) {
	r.GFlopsMedian, r.GFlopsMin, r.GFlopsMax = s.Median, s.Min, s.Max
}

func (r *benchResult) setPeak(peak, ratio spread) {
	r.PeakMedian, r.PeakMin, r.PeakMax = peak.Median, peak.Min, peak.Max
	r.PeakRatioMedian, r.PeakRatioMin, r.PeakRatioMax = ratio.Median, ratio.Min, ratio.Max
}

func (r *benchResult) setHalfPeak(peak, ratio, vsF32 spread) {
	r.PeakHalfMedian, r.PeakHalfMin, r.PeakHalfMax = peak.Median, peak.Min, peak.Max
	r.PeakHalfRatioMedian, r.PeakHalfRatioMin, r.PeakHalfRatioMax = ratio.Median, ratio.Min, ratio.Max
	r.PeakHalfVsF32Median, r.PeakHalfVsF32Min, r.PeakHalfVsF32Max = vsF32.Median, vsF32.Min, vsF32.Max
}

func (r *benchResult) setF32(g, speedup spread) {
	r.F32GFlopsMedian, r.F32GFlopsMin, r.F32GFlopsMax = g.Median, g.Min, g.Max
	r.F32SpeedupMedian, r.F32SpeedupMin, r.F32SpeedupMax = speedup.Median, speedup.Min, speedup.Max
}

func (r *benchResult) setPlain(g, speedup spread) {
	r.PlainGFlopsMedian, r.PlainGFlopsMin, r.PlainGFlopsMax = g.Median, g.Min, g.Max
	r.SpeedupMedian, r.SpeedupMin, r.SpeedupMax = speedup.Median, speedup.Min, speedup.Max
}

func (r *benchResult) setDecode(kv, read, cpy, readRatio, copyRatio spread) {
	r.KVGBpsMedian, r.KVGBpsMin, r.KVGBpsMax = kv.Median, kv.Min, kv.Max
	r.ReadGBpsMedian, r.ReadGBpsMin, r.ReadGBpsMax = read.Median, read.Min, read.Max
	r.CopyGBpsMedian, r.CopyGBpsMin, r.CopyGBpsMax = cpy.Median, cpy.Min, cpy.Max
	r.ReadRatioMedian, r.ReadRatioMin, r.ReadRatioMax = readRatio.Median, readRatio.Min, readRatio.Max
	r.CopyRatioMedian, r.CopyRatioMin, r.CopyRatioMax = copyRatio.Median, copyRatio.Min, copyRatio.Max
}

func (r benchResult) gflops() spread { return spread{r.GFlopsMedian, r.GFlopsMin, r.GFlopsMax} }
func (r benchResult) peak() spread   { return spread{r.PeakMedian, r.PeakMin, r.PeakMax} }
func (r benchResult) peakRatio() spread {
	return spread{r.PeakRatioMedian, r.PeakRatioMin, r.PeakRatioMax}
}
func (r benchResult) plainGFlops() spread {
	return spread{r.PlainGFlopsMedian, r.PlainGFlopsMin, r.PlainGFlopsMax}
}
func (r benchResult) speedup() spread { return spread{r.SpeedupMedian, r.SpeedupMin, r.SpeedupMax} }

// printTable prints the results with medians and ranges, the peaks they are
// compared with, and the decode bandwidth lines. With a 16-bit type it
// adds the 16-bit product path's peak and float32 flashattn beside it.
func printTable(w io.Writer, rs []benchResult, workers, reps int) {
	if len(rs) == 0 {
		return
	}
	isa := rs[0].PeakISA
	var peaks, hpeaks, hvs []float64
	for _, r := range rs {
		if r.PeakMedian > 0 {
			peaks = append(peaks, r.PeakMedian)
		}
		if r.PeakHalfMedian > 0 {
			hpeaks = append(hpeaks, r.PeakHalfMedian)
		}
		if r.PeakHalfVsF32Median > 0 {
			hvs = append(hvs, r.PeakHalfVsF32Median)
		}
	}
	dt, hpath := rs[0].DType, rs[0].PeakHalfPath
	fmt.Fprintf(w, "kernel %s, %d workers; %d repetitions per case, each after a run of the FP32 FMA peak loop of the %s path", rs[0].Kernel, workers, reps, isa)
	if hpath != "" {
		fmt.Fprintf(w, " and of the %s peak loop of the %s product path", dt, hpath)
	}
	fmt.Fprintln(w, ".")
	if dt != "f32" {
		fmt.Fprintf(w, "flashattn's tensors are %s", dt)
		if r, ok := dtypeFlagNamed(dt); ok && r.cache {
			fmt.Fprint(w, " (the cache; queries float32)")
		}
		fmt.Fprint(w, "; the plain algorithm is float32")
		if rs[0].F32Calls > 0 {
			fmt.Fprint(w, "; f32 GFLOP/s is float32 flashattn on the same inputs, \"vs f32\" its time over the case's")
		}
		fmt.Fprintln(w, ".")
	}
	if len(peaks) > 0 {
		fmt.Fprintf(w, "FMA peak (%s, all workers): median over cases %s GFLOP/s", isa, summarize(peaks).format("%.1f", 1, ""))
		if len(hpeaks) > 0 {
			fmt.Fprintf(w, "; %s peak (%s path, all workers): %s GFLOP/s", dt, hpath, summarize(hpeaks).format("%.1f", 1, ""))
			if len(hvs) > 0 {
				fmt.Fprintf(w, " = %s× the FMA peak", summarize(hvs).format("%.2f", 1, ""))
			}
		}
		fmt.Fprint(w, ". Figures: median (min–max) over the repetitions.\n\n")
	} else {
		fmt.Fprintf(w, "No FMA peak loop for the %s path: %% of peak is not reported. Figures: median (min–max) over the repetitions.\n\n", isa)
	}
	half := len(hpeaks) > 0
	f32 := rs[0].F32Calls > 0
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "mode\tvariant\tbatch\theads\tseqlen\theaddim\tcausal\ttime\tGFLOP/s\t% of peak\t"
	if half {
		head += "% of " + dt + " peak\t"
	}
	if f32 {
		head += "f32 GFLOP/s\tvs f32\t"
	}
	fmt.Fprintln(tw, head+"plain GFLOP/s\tspeedup\textra mem\tplain mem\t")
	for _, r := range rs {
		plainG, speed, pmem := "-", "-", "-"
		if r.PlainGFlopsMedian > 0 {
			plainG = r.plainGFlops().format("%.1f", 1, "")
			speed = r.speedup().format("%.2f", 1, "x")
			pmem = bytesString(r.PlainBytes)
		}
		pct := "-"
		if r.PeakMedian > 0 {
			pct = r.peakRatio().format("%.0f", 100, "%")
		}
		v := r.Variant
		if v == "" {
			v = "-"
		}
		if r.Density > 0 {
			v += fmt.Sprintf(" %.3f", r.Density)
		}
		seq := fmt.Sprint(r.SeqlenK)
		if r.SeqlenQ != r.SeqlenK {
			seq = fmt.Sprintf("%d/%d", r.SeqlenQ, r.SeqlenK)
		}
		hd := fmt.Sprint(r.Headdim)
		if r.dv() != r.Headdim {
			hd = fmt.Sprintf("%d/%d", r.Headdim, r.dv()) // Q and K's / V's
		}
		extra := ""
		if half {
			extra += dash(r.PeakHalfRatioMedian > 0, spread{r.PeakHalfRatioMedian, r.PeakHalfRatioMin, r.PeakHalfRatioMax}, "%.0f", 100, "%") + "\t"
		}
		if f32 {
			extra += dash(r.F32GFlopsMedian > 0, spread{r.F32GFlopsMedian, r.F32GFlopsMin, r.F32GFlopsMax}, "%.1f", 1, "") + "\t" +
				dash(r.F32SpeedupMedian > 0, spread{r.F32SpeedupMedian, r.F32SpeedupMin, r.F32SpeedupMax}, "%.2f", 1, "x") + "\t"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%v\t%.4fs\t%s\t%s\t%s%s\t%s\t%s\t%s\t\n", r.Mode, v, r.Batch, r.Heads, seq, hd,
			r.Causal, r.Seconds, r.gflops().format("%.1f", 1, ""), pct, extra, plainG, speed, bytesString(r.ExtraBytes), pmem)
	}
	tw.Flush()
	for _, r := range rs {
		if r.PlainSkipped != "" {
			fmt.Fprintf(w, "\nplain not run for %s b%d n%d d%d: %s", r.Mode, r.Batch, r.SeqlenK, r.Headdim, r.PlainSkipped)
		}
	}
	for _, r := range rs {
		if r.Mode != "decode" {
			continue
		}
		kv := spread{r.KVGBpsMedian, r.KVGBpsMin, r.KVGBpsMax}.format("%.1f", 1, "")
		switch {
		case r.Latent:
			fmt.Fprintf(w, "\ndecode (1 query row, %d query heads, seqlen_k %d, %d KV heads, MLA latent %s cache of headdim %d whose first %d columns are V): "+
				"the latent (%s per call, %s bytes per token) read at %s GB/s", r.Heads, r.SeqlenK, r.KVHeads, r.DType, r.Headdim, r.dv(),
				bytesString(r.KVBytesPerCall), fmt.Sprint(r.KVBytesPerToken), kv)
		case r.dv() != r.Headdim:
			fmt.Fprintf(w, "\ndecode (1 query row, seqlen_k %d, %d KV heads, headdim %d, V's %d, %s cache): K+V (%s per call) read at %s GB/s", r.SeqlenK, r.KVHeads, r.Headdim,
				r.dv(), r.DType, bytesString(r.KVBytesPerCall), kv)
		default:
			fmt.Fprintf(w, "\ndecode (1 query row, seqlen_k %d, %d KV heads, headdim %d, %s cache): K+V (%s per call) read at %s GB/s", r.SeqlenK, r.KVHeads, r.Headdim,
				r.DType, bytesString(r.KVBytesPerCall), kv)
		}
		if r.F32SpeedupMedian > 0 {
			fmt.Fprintf(w, ", %s the speed of the float32 cache", spread{r.F32SpeedupMedian, r.F32SpeedupMin, r.F32SpeedupMax}.format("%.2f", 1, "×"))
		}
		if r.BandwidthBytes == 0 {
			fmt.Fprintf(w, "; bandwidth not measured: %s\n", r.BandwidthSkipped)
			printCompute(w, r)
			continue
		}
		fmt.Fprintf(w, "\n  = %s of the read-only bandwidth, %s GB/s\n", spread{r.ReadRatioMedian, r.ReadRatioMin, r.ReadRatioMax}.format("%.0f", 100, "%"),
			spread{r.ReadGBpsMedian, r.ReadGBpsMin, r.ReadGBpsMax}.format("%.1f", 1, ""))
		fmt.Fprintf(w, "  = %s of the copy bandwidth (bytes read + written), %s GB/s\n", spread{r.CopyRatioMedian, r.CopyRatioMin, r.CopyRatioMax}.format("%.0f", 100, "%"),
			spread{r.CopyGBpsMedian, r.CopyGBpsMin, r.CopyGBpsMax}.format("%.1f", 1, ""))
		printCompute(w, r)
		fmt.Fprintf(w, "  bandwidth buffers: 2 × %s (last-level cache %s)\n", bytesString(r.BandwidthBytes), bytesString(r.LLCBytes))
	}
}

// printCompute prints a decode case's FLOP rate against the peaks, and
// which bound applies.
func printCompute(w io.Writer, r benchResult) {
	if r.PeakMedian <= 0 {
		return
	}
	fmt.Fprintf(w, "  = %s of the FMA peak (%s)", r.peakRatio().format("%.0f", 100, "%"), r.PeakISA)
	if r.PeakHalfRatioMedian > 0 {
		fmt.Fprintf(w, ", %s of the %s peak (%s path)", spread{r.PeakHalfRatioMedian, r.PeakHalfRatioMin, r.PeakHalfRatioMax}.format("%.0f", 100, "%"), r.DType, r.PeakHalfPath)
	}
	fmt.Fprintf(w, ", %s GFLOP/s (%.3g FLOP per call, 2·B·H·N·(D+DV))\n", r.gflops().format("%.1f", 1, ""), r.FlopsPerCall)
	switch r.Bound {
	case "compute":
		fmt.Fprintf(w, "  compute-bound: %.3g FLOP per byte read is above the machine balance of %.3g FLOP/byte (the %s over the read-only bandwidth)\n",
			r.FlopPerByte, r.BalanceFlopPerByte, r.BoundPeak)
	case "memory":
		fmt.Fprintf(w, "  bandwidth-bound: %.3g FLOP per byte read is below the machine balance of %.3g FLOP/byte (the %s over the read-only bandwidth)\n",
			r.FlopPerByte, r.BalanceFlopPerByte, r.BoundPeak)
	}
}

// dash formats s, or "-" when ok is false.
func dash(ok bool, s spread, format string, scale float64, unit string) string {
	if !ok {
		return "-"
	}
	return s.format(format, scale, unit)
}
