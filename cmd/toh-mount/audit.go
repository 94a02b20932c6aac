package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/toh-sandbox/toh/fusefence"
)

// runAudit prints the records of an audit log that pass the filter.
func runAudit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toh-mount audit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	op := fs.String("op", "", "")
	rule := fs.String("rule", "", "")
	since := fs.String("since", "", "")
	asJSON := fs.Bool("json", false, "")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	if err != nil {
		return usageError(stderr, "audit: %v", err)
	}
	if len(pos) != 1 {
		return usageError(stderr, "audit: want one audit log FILE, got %s", countArgs(len(pos)))
	}
	filter := fusefence.Filter{Op: *op, Rule: *rule}
	if *rule != "" && !slices.Contains(fusefence.Rules, *rule) {
		return usageError(stderr, "audit: unknown rule %q", *rule)
	}
	if *since != "" {
		if filter.Since, err = time.Parse(time.RFC3339Nano, *since); err != nil {
			return usageError(stderr, "audit: --since %q: want an RFC 3339 time such as 2025-01-02T15:04:05Z", *since)
		}
	}
	f, err := os.Open(pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "toh-mount: audit: %v\n", err)
		return exitFailure
	}
	defer f.Close()
	enc := json.NewEncoder(stdout)
	err = fusefence.ReadAudit(f, func(r fusefence.Record) error {
		if !filter.Match(r) {
			return nil
		}
		if *asJSON {
			if r.Dropped > 0 {
				return enc.Encode(map[string]uint64{"dropped": r.Dropped})
			}
			return enc.Encode(r.Event)
		}
		if r.Dropped > 0 {
			_, err := fmt.Fprintf(stdout, "(%d denials not recorded whole: the log could not keep up, or the disk was full)\n", r.Dropped)
			return err
		}
		mode := r.Mode
		if mode == "" {
			mode = "policy invalid"
		}
		// Both paths are quoted: they are names a caller chose, and printed raw a
		// newline in one could forge a second record, an escape sequence rewrite the
		// terminal.
		_, err := fmt.Fprintf(stdout, "%s pid %d uid %d %s %s: %s (%s, %s)\n",
			r.Time.Format(time.RFC3339Nano), r.PID, r.UID, r.Op, strconv.Quote(r.Path), strconv.Quote(r.HostPath), r.Rule, mode)
		return err
	})
	if err != nil {
		fmt.Fprintf(stderr, "toh-mount: audit %s: %v\n", pos[0], err)
		return exitFailure
	}
	return exitOK
}
