package main

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
)

// capture keeps exactly the first and the last captureHalf bytes, and counts the
// rest, whatever the sizes of the writes.
func TestCaptureKeepsHeadAndTail(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, total := range []int{0, 1, captureHalf, captureHalf + 1, 2 * captureHalf, 2*captureHalf + 1, 3*captureHalf + 12345, 5 * captureHalf} {
		full := make([]byte, total)
		for i := range full {
			full[i] = byte(r.IntN(256))
		}
		var c capture
		for p := full; len(p) > 0; {
			k := min(len(p), 1+r.IntN(captureHalf/2))
			if r.IntN(8) == 0 {
				k = min(len(p), 1+r.IntN(3*captureHalf)) // sometimes larger than the ring
			}
			if n, err := c.Write(p[:k]); n != k || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			p = p[k:]
		}
		want, omitted := full, int64(0)
		if total > 2*captureHalf {
			want = append(append([]byte{}, full[:captureHalf]...), full[total-captureHalf:]...)
			omitted = int64(total - 2*captureHalf)
		}
		if got := c.String(); got != string(want) || c.omitted != omitted {
			t.Errorf("%d bytes: kept %d bytes (equal %v), omitted %d; want %d and %d", total, len(got), got == string(want), c.omitted, len(want), omitted)
		}
	}
}

// Through the binary: a command printing more than --json keeps gets its head and
// tail, and the count of what was left out, in the envelope.
func TestJSONOutputIsBounded(t *testing.T) {
	s := newScratch(t)
	n := 2*captureHalf + 1000
	e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--mode", "danger-full-access", "-c",
		`head -c `+strconv.Itoa(n)+` /dev/zero | tr '\0' x; printf end; echo err >&2`)
	if r.code != 0 || e.Stdout == nil {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	out := *e.Stdout
	if len(out) != 2*captureHalf || !bytes.HasSuffix([]byte(out), []byte("xend")) || e.StdoutOmitted != 1003 {
		t.Errorf("stdout: %d bytes, ends %q, omitted %d; want %d, \"xend\", 1003", len(out), out[max(0, len(out)-4):], e.StdoutOmitted, 2*captureHalf)
	}
	if e.Stderr == nil || *e.Stderr != "err\n" || e.StderrOmitted != 0 {
		t.Errorf("stderr %v, omitted %d", e.Stderr, e.StderrOmitted)
	}
}
