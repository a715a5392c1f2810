package simfs

import (
	"fmt"

	"github.com/fibril-go/fibril/storage/fsys"
)

// DamageByte flips every bit of the byte at offset of file p, on the disk
// and in the page cache alike: media damage under a written record, which
// no fsync or crash undoes (unlike bit rot, which is in the read path, and
// torn tails, which are unsynced writes). The simulator injects it to
// exercise recovery checks (SPEC 7 quarantine).
func (fs *FS) DamageByte(p string, offset int64) error {
	d, name, err := fs.lookup(p)
	if err != nil {
		return err
	}
	ino := d.entries[name]
	if ino == nil {
		return fmt.Errorf("simfs: damage %s: %w", p, fsys.ErrNotExist)
	}
	if offset < 0 || offset >= int64(len(ino.data)) {
		return fmt.Errorf("simfs: damage %s at %d: past its %d bytes", p, offset, len(ino.data))
	}
	ino.data[offset] ^= 0xff
	if offset < int64(len(ino.durable)) {
		ino.durable[offset] ^= 0xff
	}
	return nil
}
