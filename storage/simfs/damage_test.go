package simfs

import (
	"testing"
)

// TestDamageByteSurvivesCrashAndPowerLoss: media damage is on the disk
// and in the page cache: a read sees it, and neither a crash nor a power
// loss takes it back.
func TestDamageByteSurvivesCrashAndPowerLoss(t *testing.T) {
	fs := New(Options{})
	if err := fs.MkdirAll("/d"); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("/d/f", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("abcdef")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/d", "/"} {
		if err := fs.SyncDir(dir); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.DamageByte("/d/f", 2); err != nil {
		t.Fatal(err)
	}
	for _, lose := range []func(){func() {}, fs.Crash, fs.PowerLoss} {
		lose()
		r, err := fs.OpenRead("/d/f")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 6)
		if _, err := r.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if got[2] != 'c'^0xff || string(got[:2]) != "ab" || string(got[3:]) != "def" {
			t.Fatalf("read %q", got)
		}
		r.Close()
	}
	if fs.DamageByte("/d/f", 6) == nil || fs.DamageByte("/d/none", 0) == nil {
		t.Fatal("damage past the end or of a missing file was accepted")
	}
}
