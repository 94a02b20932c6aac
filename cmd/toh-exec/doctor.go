package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/toh-sandbox/toh/sandbox"
)

const doctorUsage = `Usage:
  toh-exec doctor [--json] [--bwrap PATH] [--probe-timeout DUR] [--probe-cache FILE]

Probes every rung of the runner chain (bubblewrap, then Landlock, on Linux;
sandbox-exec on macOS) for real, names the measured cause of each failure with a
remedy, and prints the effective confinement: what a confined run would get.
The probe cache is neither trusted nor written; doctor says whether it is current.

Options:
  --json               print one JSON object {rungs, effective, probeCache, host}
  --bwrap PATH         diagnose this bwrap binary, as exec --bwrap would use it
  --probe-timeout DUR  bound for each probe (default 5s; 0 is rejected)
  --probe-cache FILE   report on this cache file instead of the default one
  -h, --help           show this help

Exit status:
  0    some rung confines
  2    usage error
  123  nothing can confine: every confined run fails closed (SANDBOX_UNAVAILABLE)
`

// diagnose is sandbox.Diagnose; a test replaces it to reach the "nothing confines"
// exit without a hostile kernel.
var diagnose = sandbox.Diagnose

func runDoctor(args []string, stdout, stderr io.Writer) int {
	var (
		jsonOut      bool
		bwrapPath    string
		probeCache   string
		probeTimeout = durationFlag(sandbox.DefaultProbeTimeout)
	)
	fs := flag.NewFlagSet("toh-exec doctor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&jsonOut, "json", false, "")
	fs.StringVar(&bwrapPath, "bwrap", "", "")
	fs.StringVar(&probeCache, "probe-cache", "", "")
	fs.Var(&probeTimeout, "probe-timeout", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, doctorUsage)
			return 0
		}
		return usageError(stderr, "doctor: %v", err)
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "doctor: unexpected argument %q", fs.Arg(0))
	}
	if probeTimeout <= 0 {
		return usageError(stderr, "doctor: --probe-timeout: must be positive, got %v", probeTimeout)
	}
	if probeCache == "" {
		probeCache = probeCachePath()
	} else if !filepath.IsAbs(probeCache) {
		return usageError(stderr, "doctor: --probe-cache: %q is not an absolute path", probeCache)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "toh-exec: locating the toh-exec binary: %v\n", err)
		return exitCannotStart
	}
	d, err := diagnose(context.Background(), sandbox.Options{
		BwrapPath:    bwrapPath,
		Self:         self,
		ProbeTimeout: probeTimeout.Duration(),
		Cache:        &sandbox.ProbeCache{Path: probeCache},
	})
	if err != nil {
		fmt.Fprintf(stderr, "toh-exec: doctor: %v\n", err)
		return exitCannotStart
	}
	if jsonOut {
		b, err := json.Marshal(d)
		if err != nil {
			fmt.Fprintf(stderr, "toh-exec: doctor: %v\n", err)
			return exitCannotStart
		}
		stdout.Write(append(b, '\n'))
	} else {
		printDiagnosis(stdout, d)
	}
	if !d.Confines() {
		return exitUnavailable
	}
	return 0
}

func printDiagnosis(w io.Writer, d sandbox.Diagnosis) {
	for _, r := range d.Rungs {
		verdict := "ok"
		if !r.OK {
			verdict = "FAILED"
		}
		if r.ABI > 0 {
			verdict += fmt.Sprintf(" (ABI %d)", r.ABI)
		}
		fmt.Fprintf(w, "%s: %s — %s\n", r.Backend, verdict, terminalSafe(r.Detail))
		if r.Ruleset != "" {
			fmt.Fprintf(w, "  ruleset: %s\n", r.Ruleset)
		}
		if r.Cause != "" {
			fmt.Fprintf(w, "  cause: %s\n", terminalSafe(r.Cause))
		}
		if r.Remedy != "" {
			fmt.Fprintf(w, "  remedy: %s\n", r.Remedy)
		}
	}
	fmt.Fprintln(w, d.Effective)
	c := d.ProbeCache
	path := c.Path
	if path == "" {
		path = "(none)"
	}
	fmt.Fprintf(w, "probe cache: %s: %s — %s\n", path, c.State, c.Note)
}

// terminalSafe keeps a runner's text (which a broken or hostile runner chose) from
// driving the terminal: control characters become U+FFFD, lines are indented.
func terminalSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		if r != '\n' && unicode.IsControl(r) {
			return unicode.ReplacementChar
		}
		return r
	}, strings.TrimSpace(s))
	return strings.ReplaceAll(s, "\n", "\n    ")
}
