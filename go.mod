module github.com/fibril-go/fibril

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/quic-go/quic-go v0.65.0
	github.com/tidwall/wal v1.2.1
	golang.org/x/crypto v0.54.0
	golang.org/x/sys v0.47.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/tidwall/gjson v1.10.2 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.0 // indirect
	github.com/tidwall/tinylru v1.1.0 // indirect
	golang.org/x/net v0.56.0 // indirect
)
