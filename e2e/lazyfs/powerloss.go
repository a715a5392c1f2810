package lazyfs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// A power loss turns the current tree into the tree the disk holds when
// the machine comes back. Invariants:
//   - every durable byte and every durable entry survives unchanged;
//   - nothing survives that was never written (a torn sector is new bytes,
//     but only inside the file's written length);
//   - the choices are drawn from one PRNG in a fixed order (operations by
//     number, directories and names sorted), so the same state and seed give
//     the same result.

// Tail fates: what a power loss did to a file's unsynced appended tail.
const (
	tailDropped = iota
	tailClean   // a prefix kept, cut at a sector boundary
	tailZeros   // a prefix kept, then one torn sector of zeros
	tailGarbage // a prefix kept, then one torn sector of garbage
	tailFates
)

// Sector sizes a tail is torn at.
const (
	sectorSmallBytes = 512
	sectorLargeBytes = 4096
)

// LossReport says what one power loss dropped, kept and tore.
type LossReport struct {
	Seed         uint64 // the filesystem's seed (replays every choice)
	Loss         int    // this filesystem's power losses so far, this one included
	TailsDropped int    // unsynced tails dropped whole
	TailsClean   int    // unsynced tails kept up to a sector boundary
	TailsZeros   int    // ... then torn with a sector of zeros
	TailsGarbage int    // ... then torn with a sector of garbage
	BytesDropped int64  // unsynced bytes that did not survive
	OpsKept      int    // namespace operations not made durable, kept anyway
	OpsDropped   int    // ... and dropped
	// Dropped names the first lostNamesMax dropped operations' entries
	// ("+name" a create or rename in, "-name" an unlink or rename out).
	Dropped []string
}

// lostNamesMax bounds LossReport.Dropped.
const lostNamesMax = 16

func (r LossReport) String() string {
	return fmt.Sprintf("power loss %d (seed %d): tails dropped %d, kept clean %d, torn with zeros %d, torn with garbage %d; %d unsynced bytes lost; unsynced entry operations kept %d, dropped %d %v",
		r.Loss, r.Seed, r.TailsDropped, r.TailsClean, r.TailsZeros, r.TailsGarbage, r.BytesDropped, r.OpsKept, r.OpsDropped, r.Dropped)
}

// powerLoss returns what survives of t, drawing every choice from rng;
// dropOps loses every unsynced namespace operation.
func (t *tree) powerLoss(rng *rand.Rand, report *LossReport, dropOps bool) *tree {
	keep := t.drawOps(rng, report, dropOps)
	out := &tree{nextIno: 1, now: t.now}
	memo := map[*inode]*inode{}
	onPath := map[*inode]bool{}
	out.root = out.survivor(t.root, keep, rng, report, memo, onPath)
	return out
}

// drawOps decides, for every namespace operation no directory fsync made
// fully durable, whether it survives (as a whole); dropOps: none does
// (the draw is still made, so the later choices are the seed's).
func (t *tree) drawOps(rng *rand.Rand, report *LossReport, dropOps bool) map[uint64]bool {
	ops := map[uint64]bool{}
	seen := map[*inode]bool{}
	var walk func(in *inode)
	walk = func(in *inode) {
		if !in.dir || seen[in] {
			return
		}
		seen[in] = true
		for _, c := range in.pending {
			ops[c.op] = true
			if c.target != nil {
				walk(c.target)
			}
		}
		for _, c := range in.children {
			walk(c)
		}
		for _, c := range in.durableDirs {
			walk(c)
		}
	}
	walk(t.root)
	names := map[uint64][]string{}
	for d := range seen {
		for _, c := range d.pending {
			sign := "+"
			if c.target == nil {
				sign = "-"
			}
			names[c.op] = append(names[c.op], sign+c.name)
		}
	}
	ids := make([]uint64, 0, len(ops))
	for id := range ops {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	keep := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		keep[id] = rng.IntN(2) == 0 && !dropOps
		if keep[id] {
			report.OpsKept++
		} else {
			report.OpsDropped++
			if len(report.Dropped) < lostNamesMax {
				sort.Strings(names[id])
				report.Dropped = append(report.Dropped, strings.Join(names[id], " "))
			}
		}
	}
	return keep
}

// survivor builds the inode that in becomes after the power loss. An inode
// reachable under two names (a rename whose halves were made durable
// separately) becomes one inode; a directory cycle such a mix could form
// is cut.
func (t *tree) survivor(in *inode, keep map[uint64]bool, rng *rand.Rand, report *LossReport, memo map[*inode]*inode, onPath map[*inode]bool) *inode {
	if done, ok := memo[in]; ok {
		return done
	}
	if !in.dir {
		f := t.newFile(in.mode)
		f.mtime = in.mtime
		f.data = survivingData(in, rng, report)
		f.durable = append([]byte(nil), f.data...)
		f.cleanLen = len(f.data)
		memo[in] = f
		return f
	}
	d := t.newDir(in.mode)
	d.mtime = in.mtime
	memo[in] = d
	onPath[in] = true
	view := make(map[string]*inode, len(in.durableDirs))
	for name, c := range in.durableDirs {
		view[name] = c
	}
	for _, c := range in.pending {
		if !keep[c.op] {
			continue
		}
		if c.target == nil {
			delete(view, c.name)
		} else {
			view[c.name] = c.target
		}
	}
	for _, name := range sortedNames(view) {
		c := view[name]
		if onPath[c] {
			continue
		}
		child := t.survivor(c, keep, rng, report, memo, onPath)
		d.children[name] = child
		d.durableDirs[name] = child
	}
	delete(onPath, in)
	return d
}

// survivingData is a file's content after the power loss: its durable
// bytes, and perhaps a prefix of its unsynced appended tail, cut at a
// sector boundary and perhaps followed by a torn sector.
func survivingData(in *inode, rng *rand.Rand, report *LossReport) []byte {
	durableLen, currentLen := len(in.durable), len(in.data)
	out := append([]byte(nil), in.durable...)
	appendedOnly := in.cleanLen >= durableLen && currentLen > durableLen
	if !appendedOnly {
		if currentLen != durableLen || in.cleanLen < durableLen {
			report.BytesDropped += int64(max(currentLen-durableLen, 0))
		}
		return out
	}
	fate := rng.IntN(tailFates)
	sector := sectorSmallBytes
	if rng.IntN(2) == 0 {
		sector = sectorLargeBytes
	}
	if fate == tailDropped {
		report.TailsDropped++
		report.BytesDropped += int64(currentLen - durableLen)
		return out
	}
	// Cut points: the durable end itself, or any sector boundary past it
	// within what was written.
	cuts := []int{durableLen}
	for b := (durableLen/sector + 1) * sector; b <= currentLen; b += sector {
		cuts = append(cuts, b)
	}
	// Half the time the write got as far as its last sector (a disk writes
	// in order, and a tear most often hits the sector in flight); otherwise
	// any boundary.
	cut := cuts[len(cuts)-1]
	if rng.IntN(2) == 0 {
		cut = cuts[rng.IntN(len(cuts))]
	}
	out = append(out, in.data[durableLen:cut]...)
	tornEnd := cut
	if fate != tailClean {
		tornEnd = min((cut/sector+1)*sector, currentLen)
	}
	torn := make([]byte, tornEnd-cut)
	switch fate {
	case tailClean:
		report.TailsClean++
	case tailZeros:
		report.TailsZeros++
	case tailGarbage:
		report.TailsGarbage++
		for i := range torn {
			torn[i] = byte(rng.Uint32())
		}
	}
	out = append(out, torn...)
	report.BytesDropped += int64(currentLen - cut)
	return out
}

// writeTree makes dir hold exactly t (the disk after a power loss).
func writeTree(t *tree, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return writeDir(t.root, dir)
}

func writeDir(d *inode, path string) error {
	for _, name := range sortedNames(d.children) {
		c := d.children[name]
		p := filepath.Join(path, name)
		if c.dir {
			if err := os.Mkdir(p, os.FileMode(c.mode&0o777)|0o700); err != nil {
				return err
			}
			if err := writeDir(c, p); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(p, c.data, os.FileMode(c.mode&0o777)|0o600); err != nil {
			return err
		}
	}
	return nil
}

// loadTree reads dir into a tree whose every byte and entry is durable.
func loadTree(dir string) (*tree, error) {
	t := newTree()
	if err := loadDir(t, t.root, dir); err != nil {
		return nil, err
	}
	return t, nil
}

func loadDir(t *tree, d *inode, path string) error {
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(path, e.Name())
		info, err := e.Info()
		if err != nil {
			return err
		}
		var c *inode
		switch {
		case e.IsDir():
			c = t.newDir(uint32(info.Mode().Perm()))
			if err := loadDir(t, c, p); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			c = t.newFile(uint32(info.Mode().Perm()))
			if c.data, err = os.ReadFile(p); err != nil {
				return err
			}
			c.durable = append([]byte(nil), c.data...)
			c.cleanLen = len(c.data)
		default:
			return fmt.Errorf("lazyfs: %s is neither a file nor a directory", p)
		}
		c.mtime = info.ModTime()
		d.children[e.Name()] = c
		d.durableDirs[e.Name()] = c
	}
	return nil
}
