//go:build !unix

package broker

// openFilesLimit is unknown here: the partition budget is unbounded.
func openFilesLimit() int64 { return 0 }
