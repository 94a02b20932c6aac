// Command abrun times commands interleaved: each round runs every command once (in
// order, and in reverse order every other round), so a machine whose speed drifts
// (other jobs, thermal, a noisy neighbour) slows every command alike instead of
// whichever hyperfine happened to be measuring. It is
// the A/B tool behind bench/exec-explain.sh; bench/exec.sh uses hyperfine.
//
// Usage:
//
//	abrun [-rounds N] [-warmup N] 'CMD ARGS...' ...
//
// Each command is split on white space (no quoting); leading NAME=VALUE words are
// added to its environment. Output goes to /dev/null; abrun's descriptor 3, when open,
// is the commands' descriptor 3. Ratios are to the first command.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	rounds := flag.Int("rounds", 300, "timed rounds")
	warmup := flag.Int("warmup", 10, "untimed rounds first")
	flag.Parse()
	cmds := flag.Args()
	if len(cmds) == 0 || slices.ContainsFunc(cmds, func(c string) bool { return len(strings.Fields(c)) == 0 }) {
		fmt.Fprintln(os.Stderr, "abrun: no commands, or an empty one")
		os.Exit(2)
	}
	times := make([][]float64, len(cmds))
	for i := 0; i < *warmup+*rounds; i++ {
		for k := range cmds {
			// Every other round runs the commands in reverse order, so neither end of
			// the list always runs right after the other (a load spike, a cache
			// another command warmed).
			j := k
			if i%2 == 1 {
				j = len(cmds) - 1 - k
			}
			s := cmds[j]
			c := command(s)
			t0 := time.Now()
			if err := c.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "abrun: %s: %v\n", s, err)
				os.Exit(1)
			}
			if i >= *warmup {
				times[j] = append(times[j], float64(time.Since(t0).Nanoseconds())/1e6)
			}
		}
	}
	fmt.Printf("%d interleaved rounds, ms\n", *rounds)
	fmt.Printf("%8s %8s %8s %8s %7s  %s\n", "median", "mean", "p10", "p90", "ratio", "command")
	var base float64
	for j, s := range cmds {
		v := slices.Clone(times[j])
		slices.Sort(v)
		var sum float64
		for _, x := range v {
			sum += x
		}
		med := v[len(v)/2]
		if j == 0 {
			base = med
		}
		fmt.Printf("%8.3f %8.3f %8.3f %8.3f %6.2fx  %s\n", med, sum/float64(len(v)), v[len(v)/10], v[len(v)*9/10], med/base, s)
	}
}

func command(s string) *exec.Cmd {
	f := strings.Fields(s)
	var env []string
	for len(f) > 1 && strings.Contains(f[0], "=") && !strings.Contains(f[0], "/") {
		env = append(env, f[0])
		f = f[1:]
	}
	c := exec.Command(f[0], f[1:]...)
	c.Env = append(os.Environ(), env...)
	if fd3 != nil {
		c.ExtraFiles = []*os.File{fd3}
	}
	return c
}

// fd3 is abrun's descriptor 3 when it has one, passed on to every command as their
// descriptor 3: raw bwrap rows carry toh-exec's --json-status-fd 3, and bwrap fails
// when it cannot write there (the bench scripts open it on /dev/null, exec 3>/dev/null).
var fd3 = func() *os.File {
	if _, err := unix.FcntlInt(3, unix.F_GETFD, 0); err != nil {
		return nil
	}
	return os.NewFile(3, "fd3")
}()
