//go:build !linux

package osfs

import "os"

// datasync makes f's data durable; fdatasync is Linux's, elsewhere a full
// fsync does.
func datasync(f *os.File) error { return f.Sync() }
