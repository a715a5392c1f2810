package simfs

// Power loss: the machine stops; only what is durable survives, with the
// seeded damage a real disk and filesystem may leave. Invariants:
//   - after PowerLoss every file's volatile bytes equal its durable bytes
//     and every directory's entries its durable entries: the page cache is
//     gone, and what the disk holds now is durable by definition;
//   - a file's unsynced bytes survive only as a torn prefix of an appended
//     tail, cut at a sector boundary; any other unsynced change (a
//     truncation, a rewrite after one) either survives whole or not at all;
//   - a directory keeps a seeded prefix of its unsynced operations (or,
//     with DirOpsIndependent, a seeded subset), each applied only if it
//     still makes sense (a rename of a name whose create was lost is not);
//   - files and directories are visited in sorted order, so the same Rand
//     gives the same disk.

// PowerLoss drops every write not made durable (see the package doc) and
// ends every open handle. It needs the Rand of SetFaults for its seeded
// choices; without one nothing unsynced survives.
func (fs *FS) PowerLoss() {
	fs.counters.PowerLosses++
	fs.gen++
	seen := map[*inode]bool{}
	fs.replayDir("/", seen)
}

// replayDir rebuilds directory p from its durable entries and the
// operations that survive, then its files' bytes and its surviving
// subdirectories, recursively; directories whose mkdir is lost go with
// everything in them.
func (fs *FS) replayDir(p string, seen map[*inode]bool) {
	d := fs.dirs[p]
	entries := cloneEntries(d.durable)
	subdirs := cloneSet(d.durableSubdirs)
	keep := fs.survivingOps(len(d.pending))
	for i, op := range d.pending {
		if !keep[i] {
			fs.counters.DirOpsDropped++
			continue
		}
		fs.counters.DirOpsKept++
		switch op.kind {
		case opCreate:
			if _, taken := entries[op.name]; !taken {
				entries[op.name] = op.ino
			}
		case opUnlink:
			delete(entries, op.name)
		case opRename:
			if entries[op.name] == op.ino {
				delete(entries, op.name)
				entries[op.newName] = op.ino
			}
		case opMkdir:
			subdirs[op.name] = true
		}
	}
	assertTrue(len(keep) == len(d.pending), "one decision per unsynced operation")
	d.entries, d.durable, d.pending = entries, cloneEntries(entries), nil
	for _, name := range sortedKeys(entries) {
		ino := entries[name]
		if !seen[ino] {
			seen[ino] = true
			fs.tearFile(ino)
		}
	}
	for _, name := range sortedKeys(d.subdirs) {
		child := joinDir(p, name)
		if !subdirs[name] {
			fs.dropTree(child)
			continue
		}
		fs.replayDir(child, seen)
	}
	d.subdirs, d.durableSubdirs = subdirs, cloneSet(subdirs)
}

func joinDir(parent, name string) string {
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}

// dropTree forgets directory p and everything under it.
func (fs *FS) dropTree(p string) {
	d, ok := fs.dirs[p]
	if !ok {
		return
	}
	for _, name := range sortedKeys(d.subdirs) {
		fs.dropTree(joinDir(p, name))
	}
	delete(fs.dirs, p)
}

// survivingOps decides which of count unsynced operations survive.
func (fs *FS) survivingOps(count int) []bool {
	keep := make([]bool, count)
	if count == 0 || fs.rand == nil {
		return keep
	}
	if fs.opts.DirOpsIndependent {
		for i := range keep {
			keep[i] = fs.pick(2) == 1
		}
		return keep
	}
	prefix := fs.pick(count + 1)
	for i := range prefix {
		keep[i] = true
	}
	return keep
}

// Kinds of damage to an unsynced appended tail.
const (
	tearDropAll = iota // nothing of it survives
	tearPrefix         // a prefix up to a sector boundary survives
	tearZeros          // ... then one sector of zeros (the size got there, the data did not)
	tearGarbage        // ... then one sector of garbage
	tearKinds
)

// tearFile leaves the file with what its disk holds after the power loss.
func (fs *FS) tearFile(ino *inode) {
	if !ino.dirty {
		// Clean, or pages a failed fsync left readable but never wrote.
		ino.data = append([]byte(nil), ino.durable...)
		return
	}
	durableBytes := len(ino.durable)
	if ino.dirtyFrom < durableBytes || fs.rand == nil {
		// Not a pure append: it survives whole or not at all.
		if fs.rand != nil && fs.pick(2) == 1 {
			ino.durable = append([]byte(nil), ino.data...)
		} else {
			fs.counters.FilesLostBytes++
		}
		ino.data = append([]byte(nil), ino.durable...)
		ino.dirty = false
		return
	}
	kind := fs.pick(tearKinds)
	if kind == tearDropAll {
		fs.counters.FilesLostBytes++
		ino.loseDirty()
		return
	}
	sector := sectorSmallBytes
	if fs.pick(2) == 1 {
		sector = sectorLargeBytes
	}
	// Boundaries past the durable end, up to the volatile end (which
	// counts as one: the whole tail made it).
	first := (durableBytes/sector + 1) * sector
	boundaries := 0
	if first <= len(ino.data) {
		boundaries = (len(ino.data)-first)/sector + 1
	}
	end := len(ino.data)
	if k := fs.pick(boundaries + 1); k < boundaries {
		end = first + k*sector
	}
	kept := append([]byte(nil), ino.data[:end]...)
	if end < len(ino.data) && kind != tearPrefix {
		junkEnd := min(end+sector, len(ino.data))
		junk := make([]byte, junkEnd-end)
		if kind == tearGarbage {
			for i := range junk {
				junk[i] = byte(fs.rand.Uint64())
			}
			fs.counters.TornGarbage++
		} else {
			fs.counters.TornZeros++
		}
		kept = append(kept, junk...)
	}
	if len(kept) < len(ino.data) || kind != tearPrefix {
		fs.counters.TornTails++
	}
	assertTrue(len(kept) >= durableBytes && len(kept) <= len(ino.data), "a torn tail lies between the durable and the volatile end")
	ino.durable = kept
	ino.data = append([]byte(nil), kept...)
	ino.dirty = false
}
