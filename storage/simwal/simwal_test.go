package simwal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fibril-go/fibril/io/logstore/osfs"
	"github.com/fibril-go/fibril/storage/fsys"
	"github.com/fibril-go/fibril/storage/simfs"
)

// simwal against tidwall: the same operations, on tidwall over a real
// directory, on simwal over simfs and on simwal over the OS, must leave
// byte-identical files and report the same indexes and outcomes.

type walUnderTest struct {
	name string
	fs   fsys.FS
	dir  string
	open fsys.OpenSegmentLog
	log  fsys.SegmentLog
}

func listing(t *testing.T, w *walUnderTest) map[string][]byte {
	t.Helper()
	entries, err := w.fs.ReadDir(w.dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		data, err := readFile(w.fs, w.dir+"/"+e.Name)
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name] = data
	}
	return out
}

func sameFiles(t *testing.T, step string, ws []*walUnderTest) {
	t.Helper()
	want := listing(t, ws[0])
	for _, w := range ws[1:] {
		got := listing(t, w)
		if len(got) != len(want) {
			t.Fatalf("%s: %s has %d files, %s %d", step, w.name, len(got), ws[0].name, len(want))
		}
		for name, data := range want {
			if !bytes.Equal(got[name], data) {
				t.Fatalf("%s: %s differs in %s (%d bytes vs %d)", step, name, w.name, len(got[name]), len(data))
			}
		}
	}
}

func indexes(t *testing.T, l fsys.SegmentLog) string {
	first, err1 := l.FirstIndex()
	last, err2 := l.LastIndex()
	return fmt.Sprintf("%d..%d %v %v", first, last, err1, err2)
}

func newWals(t *testing.T) []*walUnderTest {
	sim := simfs.New(simfs.Options{})
	return []*walUnderTest{
		{name: "tidwall", fs: osfs.FS{}, dir: t.TempDir(), open: osfs.OpenTidwall},
		{name: "simwal/simfs", fs: sim, dir: "/wal", open: Opener(sim)},
		{name: "simwal/os", fs: osfs.FS{}, dir: t.TempDir(), open: Opener(osfs.FS{})},
	}
}

func TestSameFilesAsTidwall(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { sameAsTidwall(t, seed) })
	}
}

func sameAsTidwall(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 77))
	opts := fsys.SegmentLogOptions{SegmentSizeBytes: 256 + rng.IntN(2048), NoSync: seed%2 == 0}
	ws := newWals(t)
	for _, w := range ws {
		l, err := w.open(w.dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		w.log = l
	}
	next := uint64(1)
	for step := range 120 {
		op := rng.IntN(10)
		var label string
		var errs []error
		switch {
		case op < 6:
			count, sizeMax := 1+rng.IntN(12), rng.IntN(400)
			datas := make([][]byte, count)
			for i := range datas {
				datas[i] = bytes.Repeat([]byte{byte(rng.Uint32())}, rng.IntN(sizeMax+1))
			}
			label = fmt.Sprintf("step %d: batch of %d at %d", step, count, next)
			for _, w := range ws {
				b := w.log.NewBatch()
				for i, d := range datas {
					b.Write(next+uint64(i), d)
				}
				errs = append(errs, w.log.WriteBatch(b))
			}
			next += uint64(count)
		case op < 7:
			label = fmt.Sprintf("step %d: sync", step)
			for _, w := range ws {
				errs = append(errs, w.log.Sync())
			}
		case op < 9:
			first, _ := ws[0].log.FirstIndex()
			index := first + uint64(rng.IntN(int(next-first)+1))
			label = fmt.Sprintf("step %d: truncate front at %d", step, index)
			for _, w := range ws {
				errs = append(errs, w.log.TruncateFront(index))
			}
		default:
			label = fmt.Sprintf("step %d: close and reopen", step)
			for _, w := range ws {
				err := w.log.Close()
				l, openErr := w.open(w.dir, opts)
				w.log = l
				errs = append(errs, errors.Join(err, openErr))
			}
		}
		for i, err := range errs {
			if (err == nil) != (errs[0] == nil) {
				t.Fatalf("%s: %s says %v, %s says %v", label, ws[i].name, err, ws[0].name, errs[0])
			}
		}
		if errs[0] != nil {
			t.Fatalf("%s: %v", label, errs[0])
		}
		for _, w := range ws[1:] {
			if got, want := indexes(t, w.log), indexes(t, ws[0].log); got != want {
				t.Fatalf("%s: %s at %s, tidwall at %s", label, w.name, got, want)
			}
		}
		sameFiles(t, label, ws)
	}
	for _, w := range ws {
		if err := w.log.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTornTailFailsOpen: a tail segment cut inside a frame makes Open
// fail as corrupt, for both; a clean cut between frames opens.
func TestTornTailFailsOpen(t *testing.T) {
	ws := newWals(t)
	opts := fsys.SegmentLogOptions{SegmentSizeBytes: 1 << 20, NoSync: true}
	for _, w := range ws {
		l, err := w.open(w.dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		b := l.NewBatch()
		for i := uint64(1); i <= 5; i++ {
			b.Write(i, bytes.Repeat([]byte{'r'}, 100))
		}
		if err := l.WriteBatch(b); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		tail := w.dir + "/" + segmentName(1)
		f, err := w.fs.OpenAppend(tail)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(4*101 + 50); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if _, err := w.open(w.dir, opts); !errors.Is(err, fsys.ErrSegmentCorrupt) {
			t.Fatalf("%s: open of a torn tail: %v", w.name, err)
		}
		f, _ = w.fs.OpenAppend(tail)
		f.Truncate(4 * 101)
		f.Close()
		l, err = w.open(w.dir, opts)
		if err != nil {
			t.Fatalf("%s: open after a clean cut: %v", w.name, err)
		}
		if last, _ := l.LastIndex(); last != 4 {
			t.Fatalf("%s: last index %d", w.name, last)
		}
		l.Close()
	}
}

// TestFinishesInterruptedTruncateFront: a .START left by a crash is
// finished the same way.
func TestFinishesInterruptedTruncateFront(t *testing.T) {
	ws := newWals(t)
	opts := fsys.SegmentLogOptions{SegmentSizeBytes: 300, NoSync: true}
	for _, w := range ws {
		l, err := w.open(w.dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		b := l.NewBatch()
		for i := uint64(1); i <= 20; i++ {
			b.Write(i, bytes.Repeat([]byte{byte(i)}, 60))
		}
		if err := l.WriteBatch(b); err != nil {
			t.Fatal(err)
		}
		l.Close()
		// What TruncateFront(8) writes first, before a crash: segment 6
		// (frames of 61 bytes, 5 to a 300-byte segment) from its third frame.
		data, err := readFile(w.fs, w.dir+"/"+segmentName(6))
		if err != nil {
			t.Fatal(err)
		}
		f, _ := w.fs.Create(w.dir+"/"+segmentName(8)+".START", true)
		f.Write(data[2*61:])
		f.Close()
	}
	for _, w := range ws {
		l, err := w.open(w.dir, opts)
		if err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if first, _ := l.FirstIndex(); first != 8 {
			t.Fatalf("%s: first index %d", w.name, first)
		}
		l.Close()
	}
	sameFiles(t, "after the finished truncation", ws)
}
