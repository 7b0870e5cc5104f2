package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// compareSummary is the final JSON object of -compare.
type compareSummary struct {
	Compare     bool         `json:"compare"`
	Steps       int          `json:"steps"`
	MaxDiff     float64      `json:"max_abs_loss_diff"`
	MaxDiffStep int          `json:"max_diff_step"`
	Flash       trainSummary `json:"flash"`
	Plain       trainSummary `json:"plain"`
}

// runCompare trains the same model from the same seed with flash and with
// plain attention for the first f.compare steps of the schedule, prints
// the largest difference between the two loss curves and draws them.
func runCompare(f trainFlags, stdout, stderr io.Writer) error {
	var runs [2]trainResult
	for i, a := range []string{"flash", "plain"} {
		r, err := trainOnce(f, a, f.compare, stdout, stderr)
		if err != nil {
			return fmt.Errorf("%s: %v", a, err)
		}
		runs[i] = r
	}
	c := compareSummary{Compare: true, Steps: f.compare, Flash: runs[0].summary, Plain: runs[1].summary}
	for i := range runs[0].losses {
		if d := math.Abs(runs[0].losses[i] - runs[1].losses[i]); d > c.MaxDiff || i == 0 {
			c.MaxDiff, c.MaxDiffStep = d, i+1
		}
	}
	human := f.humanOut(stdout, stderr)
	fmt.Fprintf(human, "flash vs plain over %d steps: max |loss_flash - loss_plain| = %.3g (step %d); %.1f vs %.1f ms/step (plain/flash %.2f×)\n",
		c.Steps, c.MaxDiff, c.MaxDiffStep, c.Flash.StepMs, c.Plain.StepMs, c.Plain.StepMs/c.Flash.StepMs)
	if f.svg != "" {
		if err := drawLossCurves(f.svg, runs[0].losses, runs[1].losses); err != nil {
			return err
		}
		fmt.Fprintf(human, "wrote %s\n", f.svg)
	}
	if f.json {
		return json.NewEncoder(stdout).Encode(c)
	}
	return nil
}
