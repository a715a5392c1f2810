package certs

// Holder serves the broker's current TLS material to listeners and swaps
// it on a reload (POST /admin/api/tls/reload). Invariants:
//   - listeners read the leaf through GetCertificate at each handshake, so a
//     swap reaches new TCP-TLS and QUIC handshakes at once and leaves open
//     connections on the certificate they negotiated;
//   - material is validated before the swap (parses, the key matches the
//     leaf, the leaf is within its validity and signed by the CA); on any
//     failure the old material keeps serving;
//   - a reload never mints or writes anything: it reads what the operator
//     put in <data_dir>/tls.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Holder holds the current Material.
type Holder struct {
	cur atomic.Pointer[Material]
	// reloadMu serialises reloads (the swap itself is one atomic store).
	reloadMu sync.Mutex
	now      func() time.Time
	// onReload, under reloadMu, is told each material swapped in.
	onReload func(*Material)
}

// OnReload has f called (once per successful reload, after the swap) with
// the new material: the broker republishes its local trust file there, in
// case the CA changed. Set it before the first Reload.
func (h *Holder) OnReload(f func(*Material)) {
	h.reloadMu.Lock()
	h.onReload = f
	h.reloadMu.Unlock()
}

// NewHolder serves m until a reload replaces it.
func NewHolder(m *Material) *Holder {
	if m == nil {
		panic("certs: a holder needs material")
	}
	h := &Holder{now: time.Now}
	h.cur.Store(m)
	return h
}

// Current is the material served now.
func (h *Holder) Current() *Material { return h.cur.Load() }

// ServerTLS is a server configuration that asks the holder for the leaf at
// every handshake (listeners clone it; GetCertificate survives the clone).
func (h *Holder) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &h.cur.Load().Leaf, nil
		},
	}
}

// Reload reads ca.pem, server.pem and server.key from the current
// material's directory, validates them and swaps them in. On an error the
// old material keeps serving; the error says what is wrong.
func (h *Holder) Reload() (*Material, error) {
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	dir := h.cur.Load().Dir
	m, err := loadStrict(dir, h.now())
	if err != nil {
		return nil, err
	}
	h.cur.Store(m)
	if h.onReload != nil {
		h.onReload(m)
	}
	return m, nil
}

// loadStrict loads material without minting anything, refusing what would
// not serve.
func loadStrict(dir string, now time.Time) (*Material, error) {
	caPEM, err := os.ReadFile(filepath.Join(dir, CACertFileName))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", CACertFileName, err)
	}
	ca, err := parseCertPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s does not parse: %w", CACertFileName, err)
	}
	certPEM, err := os.ReadFile(filepath.Join(dir, LeafFileName))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", LeafFileName, err)
	}
	leaf, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("%s does not parse: %w", LeafFileName, err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, LeafKeyName))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", LeafKeyName, err)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s does not parse: %w", LeafKeyName, err)
	}
	if !publicKeysEqual(key.Public(), leaf.PublicKey) {
		return nil, fmt.Errorf("%s does not match %s", LeafKeyName, LeafFileName)
	}
	if err := checkValidity(leaf, now); err != nil {
		return nil, fmt.Errorf("%s: %w", LeafFileName, err)
	}
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("%s is not signed by %s: %w", LeafFileName, CACertFileName, err)
	}
	return newMaterial(dir, ca, caPEM, leaf, key), nil
}

func checkValidity(c *x509.Certificate, now time.Time) error {
	switch {
	case now.Before(c.NotBefore):
		return fmt.Errorf("not valid before %s", c.NotBefore.UTC().Format(time.RFC3339))
	case !now.Before(c.NotAfter):
		return fmt.Errorf("expired at %s", c.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}
