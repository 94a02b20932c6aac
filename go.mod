module github.com/toh-sandbox/toh

go 1.26.8

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/landlock-lsm/go-landlock v0.11.2 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
