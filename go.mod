module github.com/toh-sandbox/toh

go 1.26.8

require (
	github.com/google/go-cmp v0.7.0
	github.com/hanwen/go-fuse/v2 v2.12.1
	golang.org/x/sys v0.50.0
)
