// Command hfreport summarises hyperfine --export-json files of one benchmark session
// (one file per round, the same named commands in each) and computes the ratios the
// speed goals are stated in, from that session only.
//
// Runs are pooled across rounds for the table; each ratio is also computed per round,
// and the spread of those per-round ratios is printed, because a shared machine drifts
// between the moments hyperfine measures one command and the next.
//
// Usage:
//
//	hfreport [-md FILE] [-json FILE] [-ratio NAME/BASE[:GOAL]]... [-label NAME=TEXT]... ROUND.json...
//
// A ratio is "NAME over BASE" for the means and for the medians; GOAL, when given, is
// the largest ratio that meets the goal, and it is met only when both ratios are
// within it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

type hfFile struct {
	Results []hfResult `json:"results"`
}

type hfResult struct {
	Command   string    `json:"command"`
	Times     []float64 `json:"times"`
	ExitCodes []*int    `json:"exit_codes"`
}

// stats are in milliseconds.
type stats struct {
	Name   string  `json:"name"`
	Label  string  `json:"label,omitempty"`
	Runs   int     `json:"runs"`
	Mean   float64 `json:"mean_ms"`
	Stddev float64 `json:"stddev_ms"`
	Median float64 `json:"median_ms"`
	P10    float64 `json:"p10_ms"`
	P90    float64 `json:"p90_ms"`
	Min    float64 `json:"min_ms"`
	Max    float64 `json:"max_ms"`
	Spikes int     `json:"spikes"` // runs slower than 5x the median
	Failed int     `json:"failed_runs"`
}

type ratio struct {
	Name        string    `json:"name"`
	Base        string    `json:"base"`
	Goal        float64   `json:"goal,omitempty"`
	OfMeans     float64   `json:"of_means"`
	OfMedians   float64   `json:"of_medians"`
	OverheadMs  float64   `json:"overhead_mean_ms"`
	RoundMeans  []float64 `json:"per_round_of_means"`
	RoundMedian []float64 `json:"per_round_of_medians"`
	Met         *bool     `json:"goal_met,omitempty"`
	Unclear     bool      `json:"goal_unclear,omitempty"` // means and medians disagree
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	var ratios, labels multiFlag
	mdPath := flag.String("md", "", "also write the markdown report to FILE")
	jsonPath := flag.String("json", "", "write a compact summary (no raw times) to FILE")
	flag.Var(&ratios, "ratio", "NAME/BASE[:GOAL] (repeatable)")
	flag.Var(&labels, "label", "NAME=TEXT shown next to NAME (repeatable)")
	flag.Parse()
	if err := run(flag.Args(), ratios, labels, *mdPath, *jsonPath); err != nil {
		fmt.Fprintf(os.Stderr, "hfreport: %v\n", err)
		os.Exit(1)
	}
}

func run(files, ratioSpecs, labelSpecs []string, mdPath, jsonPath string) error {
	if len(files) == 0 {
		return fmt.Errorf("no hyperfine JSON files given")
	}
	label := map[string]string{}
	for _, l := range labelSpecs {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("-label %q: want NAME=TEXT", l)
		}
		label[k] = v
	}
	var order []string
	pooled := map[string][]float64{}
	failed := map[string]int{}
	rounds := make([]map[string][]float64, len(files))
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var hf hfFile
		if err := json.Unmarshal(b, &hf); err != nil {
			return fmt.Errorf("parsing %s: %w", f, err)
		}
		rounds[i] = map[string][]float64{}
		for _, r := range hf.Results {
			if _, ok := pooled[r.Command]; !ok {
				order = append(order, r.Command)
			}
			ms := make([]float64, len(r.Times))
			for j, t := range r.Times {
				ms[j] = t * 1000
			}
			pooled[r.Command] = append(pooled[r.Command], ms...)
			rounds[i][r.Command] = ms
			for _, c := range r.ExitCodes {
				if c == nil || *c != 0 {
					failed[r.Command]++
				}
			}
		}
	}
	all := map[string]stats{}
	var table []stats
	for _, name := range order {
		s := summarize(name, pooled[name])
		s.Label = label[name]
		s.Failed = failed[name]
		all[name] = s
		table = append(table, s)
	}
	var rs []ratio
	for _, spec := range ratioSpecs {
		r, err := computeRatio(spec, all, rounds)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	var md strings.Builder
	writeMarkdown(&md, table, rs, len(files))
	os.Stdout.WriteString(md.String())
	if mdPath != "" {
		if err := os.WriteFile(mdPath, []byte(md.String()), 0o644); err != nil {
			return err
		}
	}
	if jsonPath != "" {
		b, err := json.MarshalIndent(struct {
			Rounds   int      `json:"rounds"`
			Commands []stats  `json:"commands"`
			Ratios   []ratio  `json:"ratios"`
			Files    []string `json:"files"`
		}{len(files), table, rs, files}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func summarize(name string, ms []float64) stats {
	s := stats{Name: name, Runs: len(ms)}
	if len(ms) == 0 {
		return s
	}
	v := slices.Clone(ms)
	slices.Sort(v)
	var sum float64
	for _, x := range v {
		sum += x
	}
	s.Mean = sum / float64(len(v))
	var sq float64
	for _, x := range v {
		sq += (x - s.Mean) * (x - s.Mean)
	}
	if len(v) > 1 {
		s.Stddev = math.Sqrt(sq / float64(len(v)-1))
	}
	s.Median = quantile(v, 0.5)
	s.P10, s.P90 = quantile(v, 0.1), quantile(v, 0.9)
	s.Min, s.Max = v[0], v[len(v)-1]
	for _, x := range v {
		if x > 5*s.Median {
			s.Spikes++
		}
	}
	return s
}

// quantile interpolates linearly between the closest ranks of sorted v.
func quantile(v []float64, q float64) float64 {
	pos := q * float64(len(v)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return v[lo] + (v[hi]-v[lo])*(pos-float64(lo))
}

func computeRatio(spec string, all map[string]stats, rounds []map[string][]float64) (ratio, error) {
	pair, goalText, hasGoal := strings.Cut(spec, ":")
	name, base, ok := strings.Cut(pair, "/")
	if !ok {
		return ratio{}, fmt.Errorf("-ratio %q: want NAME/BASE[:GOAL]", spec)
	}
	a, okA := all[name]
	b, okB := all[base]
	if !okA || !okB {
		return ratio{}, fmt.Errorf("-ratio %q: no command named %q or %q in the results", spec, name, base)
	}
	r := ratio{Name: name, Base: base, OfMeans: a.Mean / b.Mean, OfMedians: a.Median / b.Median, OverheadMs: a.Mean - b.Mean}
	if hasGoal {
		g, err := strconv.ParseFloat(goalText, 64)
		if err != nil {
			return ratio{}, fmt.Errorf("-ratio %q: goal: %w", spec, err)
		}
		r.Goal = g
		// Judged on both: a few spikes can move a mean across the line, a median
		// hides a slow tail.
		met := r.OfMeans <= g && r.OfMedians <= g
		r.Met = &met
		r.Unclear = (r.OfMeans <= g) != (r.OfMedians <= g)
	}
	for _, rd := range rounds {
		ra, rb := summarize(name, rd[name]), summarize(base, rd[base])
		if ra.Runs == 0 || rb.Runs == 0 {
			continue
		}
		r.RoundMeans = append(r.RoundMeans, ra.Mean/rb.Mean)
		r.RoundMedian = append(r.RoundMedian, ra.Median/rb.Median)
	}
	return r, nil
}

func writeMarkdown(w io.Writer, table []stats, rs []ratio, nRounds int) {
	fmt.Fprintf(w, "Times in ms, %d round(s) pooled. Spikes: runs slower than 5x the median.\n\n", nRounds)
	fmt.Fprintln(w, "| name | command | runs | mean ± σ | median | p10 … p90 | min … max | spikes |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|")
	for _, s := range table {
		lbl := s.Label
		if s.Failed > 0 {
			lbl += fmt.Sprintf(" (**%d runs exited non-zero**)", s.Failed)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.2f ± %.2f | %.2f | %.2f … %.2f | %.2f … %.1f | %d |\n",
			s.Name, lbl, s.Runs, s.Mean, s.Stddev, s.Median, s.P10, s.P90, s.Min, s.Max, s.Spikes)
	}
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| ratio | of means | of medians | overhead (mean) | per-round ratios of means | goal |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|---|")
	for _, r := range rs {
		goal := "—"
		if r.Met != nil {
			verdict := "**missed**"
			switch {
			case *r.Met:
				verdict = "met"
			case r.Unclear:
				verdict = "unclear (means and medians disagree)"
			}
			goal = fmt.Sprintf("≤ %.2f× %s", r.Goal, verdict)
		}
		fmt.Fprintf(w, "| %s / %s | %.2f× | %.2f× | %+.2f ms | %s | %s |\n",
			r.Name, r.Base, r.OfMeans, r.OfMedians, r.OverheadMs, spread(r.RoundMeans), goal)
	}
}

func spread(v []float64) string {
	if len(v) == 0 {
		return "—"
	}
	if len(v) > 6 {
		sorted := slices.Clone(v)
		slices.Sort(sorted)
		return fmt.Sprintf("%.2f … %.2f … %.2f (min, median, max of %d)",
			sorted[0], quantile(sorted, 0.5), sorted[len(sorted)-1], len(sorted))
	}
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}
