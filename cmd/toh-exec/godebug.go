// The runtime's GOMAXPROCS updater (Go 1.25+) starts a goroutine in every Go program
// at its start so that sysmon can adjust GOMAXPROCS to a changing CPU count or cgroup
// limit, once a second at most. toh-exec and its launcher stage live for the length of
// one command and do almost nothing meanwhile (the bwrap rung sets one P itself, which
// turns the updater off anyway). Without the goroutine both start a little faster:
// the launcher stage alone by 0.04-0.11 ms, `toh-exec --runner landlock -- true` by
// -0.08, +0.02 and -0.03 ms in three interleaved sessions (bench/README.md).

//go:debug updatemaxprocs=0

package main
