package osfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync makes f's data durable, and the metadata needed to read it back
// (its size), without the inode's timestamps: fdatasync.
func datasync(f *os.File) error {
	for {
		// EINTR means the call did not run (as os.File.Sync retries it);
		// any other error is final, like every fsync error here.
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
