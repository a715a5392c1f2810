package certs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mintedElsewhere returns server.pem and server.key of another broker's
// material (another CA).
func mintedElsewhere(t *testing.T) (cert, key []byte) {
	t.Helper()
	other := t.TempDir()
	if _, err := LoadOrCreate(other); err != nil {
		t.Fatal(err)
	}
	cert, _ = os.ReadFile(filepath.Join(other, TLSDirName, LeafFileName))
	key, _ = os.ReadFile(filepath.Join(other, TLSDirName, LeafKeyName))
	return cert, key
}

// A reload swaps the material only when it validates; every refusal keeps
// the old leaf serving through GetCertificate.
func TestHolderReloadValidatesBeforeTheSwap(t *testing.T) {
	dataDir := t.TempDir()
	m, err := LoadOrCreate(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHolder(m)
	var told []*Material
	h.OnReload(func(m *Material) { told = append(told, m) })
	conf := h.ServerTLS().Clone() // listeners clone it
	served := func() string {
		c, err := conf.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return FingerprintSHA256(c.Certificate[0])
	}
	if served() != m.LeafFingerprintSHA256 {
		t.Fatal("the holder does not serve its material")
	}
	dir := filepath.Join(dataDir, TLSDirName)
	leafPath, keyPath := filepath.Join(dir, LeafFileName), filepath.Join(dir, LeafKeyName)
	goodCert, _ := os.ReadFile(leafPath)
	goodKey, _ := os.ReadFile(keyPath)
	otherCert, otherKey := mintedElsewhere(t)
	restore := func() {
		os.WriteFile(leafPath, goodCert, 0o600)
		os.WriteFile(keyPath, goodKey, 0o600)
		h.now = time.Now
	}
	cases := []struct {
		name, want string
		break_     func()
	}{
		{"garbage cert", "does not parse", func() { os.WriteFile(leafPath, []byte("nope"), 0o600) }},
		{"garbage key", "does not parse", func() { os.WriteFile(keyPath, []byte("nope"), 0o600) }},
		{"missing key", "read server.key", func() { os.Remove(keyPath) }},
		{"key of another cert", "does not match", func() { os.WriteFile(keyPath, otherKey, 0o600) }},
		{"another CA's leaf", "not signed by", func() { os.WriteFile(leafPath, otherCert, 0o600); os.WriteFile(keyPath, otherKey, 0o600) }},
		{"expired", "expired", func() { h.now = func() time.Time { return m.LeafCert.NotAfter.Add(time.Minute) } }},
		{"not yet valid", "not valid before", func() { h.now = func() time.Time { return m.LeafCert.NotBefore.Add(-time.Minute) } }},
	}
	for _, c := range cases {
		c.break_()
		_, err := h.Reload()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: reload said %v, want %q", c.name, err, c.want)
		}
		if served() != m.LeafFingerprintSHA256 || h.Current() != m || len(told) != 0 {
			t.Fatalf("%s: a refused reload swapped the material", c.name)
		}
		restore()
	}
	os.Remove(leafPath)
	os.Remove(keyPath)
	fresh, err := LoadOrCreate(dataDir) // mints a new leaf from the same CA
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if len(told) != 1 || told[0] != got {
		t.Fatalf("OnReload told %d times", len(told))
	}
	if got.LeafFingerprintSHA256 != fresh.LeafFingerprintSHA256 || served() != fresh.LeafFingerprintSHA256 || served() == m.LeafFingerprintSHA256 {
		t.Fatal("a valid reload did not reach new handshakes")
	}
}
