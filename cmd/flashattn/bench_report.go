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
	Batch   int    `json:"batch"`
	Heads   int    `json:"heads"`
	KVHeads int    `json:"kv_heads"`
	SeqlenQ int    `json:"seqlen_q"`
	SeqlenK int    `json:"seqlen_k"`
	Headdim int    `json:"headdim"`
	Causal  bool   `json:"causal"`
	// Density is the fraction of visible blocks of a block-sparse case.
	Density float64 `json:"density,omitempty"`
	Kernel  string  `json:"kernel"`
	Workers int     `json:"workers"`
	// Reps repetitions of Calls timed calls each (PlainCalls for plain).
	Reps       int `json:"reps"`
	Calls      int `json:"calls_per_rep"`
	PlainCalls int `json:"plain_calls_per_rep,omitempty"`

	Seconds      float64 `json:"seconds_median"` // per call
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

	PlainGFlopsMedian float64 `json:"plain_gflops_median,omitempty"`
	PlainGFlopsMin    float64 `json:"plain_gflops_min,omitempty"`
	PlainGFlopsMax    float64 `json:"plain_gflops_max,omitempty"`
	SpeedupMedian     float64 `json:"speedup_median,omitempty"`
	SpeedupMin        float64 `json:"speedup_min,omitempty"`
	SpeedupMax        float64 `json:"speedup_max,omitempty"`
	PlainSkipped      string  `json:"plain_skipped,omitempty"`

	ExtraBytes uint64 `json:"extra_bytes"`
	PlainBytes uint64 `json:"plain_extra_bytes,omitempty"`

	// Decode: bytes of K and V read per second; the read-only bandwidth and
	// the copy bandwidth (bytes read + written) of buffers of
	// BandwidthBytes each, well beyond the last-level cache (LLCBytes);
	// and the decode rate's ratio to each.
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
}

func (r *benchResult) setGFlops(s spread) {
	r.GFlopsMedian, r.GFlopsMin, r.GFlopsMax = s.Median, s.Min, s.Max
}

func (r *benchResult) setPeak(peak, ratio spread) {
	r.PeakMedian, r.PeakMin, r.PeakMax = peak.Median, peak.Min, peak.Max
	r.PeakRatioMedian, r.PeakRatioMin, r.PeakRatioMax = ratio.Median, ratio.Min, ratio.Max
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

// printTable prints the results with medians and ranges, the peak they are
// compared with, and the decode bandwidth lines.
func printTable(w io.Writer, rs []benchResult, workers, reps int) {
	if len(rs) == 0 {
		return
	}
	isa := rs[0].PeakISA
	var peaks []float64
	for _, r := range rs {
		if r.PeakMedian > 0 {
			peaks = append(peaks, r.PeakMedian)
		}
	}
	fmt.Fprintf(w, "kernel %s, %d workers; %d repetitions per case, each after a run of the FP32 FMA peak loop of the %s path.\n", rs[0].Kernel, workers, reps, isa)
	if len(peaks) > 0 {
		fmt.Fprintf(w, "FMA peak (%s, all workers): median over cases %s GFLOP/s. Figures: median (min–max) over the repetitions.\n\n", isa, summarize(peaks).format("%.1f", 1, ""))
	} else {
		fmt.Fprintf(w, "No FMA peak loop for the %s path: %% of peak is not reported. Figures: median (min–max) over the repetitions.\n\n", isa)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tvariant\tbatch\theads\tseqlen\theaddim\tcausal\ttime\tGFLOP/s\t% of peak\tplain GFLOP/s\tspeedup\textra mem\tplain mem\t")
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
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%v\t%.4fs\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Mode, v, r.Batch, r.Heads, seq, r.Headdim,
			r.Causal, r.Seconds, r.gflops().format("%.1f", 1, ""), pct, plainG, speed, bytesString(r.ExtraBytes), pmem)
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
		fmt.Fprintf(w, "\ndecode (1 query row, seqlen_k %d, %d KV heads, headdim %d): K+V read at %s GB/s", r.SeqlenK, r.KVHeads, r.Headdim,
			spread{r.KVGBpsMedian, r.KVGBpsMin, r.KVGBpsMax}.format("%.1f", 1, ""))
		if r.BandwidthBytes == 0 {
			fmt.Fprintf(w, "; bandwidth not measured: %s\n", r.BandwidthSkipped)
			continue
		}
		fmt.Fprintf(w, "\n  = %s of the read-only bandwidth, %s GB/s\n", spread{r.ReadRatioMedian, r.ReadRatioMin, r.ReadRatioMax}.format("%.0f", 100, "%"),
			spread{r.ReadGBpsMedian, r.ReadGBpsMin, r.ReadGBpsMax}.format("%.1f", 1, ""))
		fmt.Fprintf(w, "  = %s of the copy bandwidth (bytes read + written), %s GB/s\n", spread{r.CopyRatioMedian, r.CopyRatioMin, r.CopyRatioMax}.format("%.0f", 100, "%"),
			spread{r.CopyGBpsMedian, r.CopyGBpsMin, r.CopyGBpsMax}.format("%.1f", 1, ""))
		fmt.Fprintf(w, "  bandwidth buffers: 2 × %s (last-level cache %s)\n", bytesString(r.BandwidthBytes), bytesString(r.LLCBytes))
	}
}
