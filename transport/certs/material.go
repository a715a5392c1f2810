// Package certs makes and loads the broker's TLS material and builds client trust
// configurations (SPEC §10, PROTOCOL §1.6).
//
// The broker's auto-generated material lives in <data_dir>/tls: an ECDSA P-256 CA
// (ca.pem, ca.key) and a server leaf signed by it (server.pem, server.key). Keys
// are written 0600. The CA is made once and kept, so its fingerprint, which
// clients pin, is stable; the leaf is re-minted from the CA when it is missing,
// near expiry, or lacks a requested name.
//
// Clients trust the broker by, in order of precedence: a SHA-256 fingerprint pin
// (of the leaf, or of the CA with path validation and no hostname check), a CA
// file, the local trust file a broker on the same machine publishes (loopback
// addresses only; see PublishLocalTrust), or the OS roots.
package certs

// Invariants:
//   - ca.key is never rewritten while ca.pem exists: regenerating the CA would
//     invalidate every client pin.
//   - Every file is written atomically (temp file, fsync, rename, fsync dir), so a
//     crash leaves either the old or the new file, never a torn one.
//   - Material.Leaf's chain is [leaf, CA]: the server presents the CA so a client
//     pinning the CA can validate the path without holding the CA file.

import (
	"crypto"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// File names under <data_dir>/tls.
const (
	TLSDirName     = "tls"
	CACertFileName = "ca.pem"
	CAKeyFileName  = "ca.key"
	LeafFileName   = "server.pem"
	LeafKeyName    = "server.key"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 397 * 24 * time.Hour // the longest leaf lifetime browsers accept (admin HTTPS shares it)
	// leafRenewBefore: a leaf closer than this to expiry is re-minted at load,
	// matching the cert_expiring attention threshold (SPEC §11).
	leafRenewBefore = 30 * 24 * time.Hour
	// clockSkewAllowance backdates NotBefore so a client whose clock is a little
	// behind still accepts a freshly minted certificate.
	clockSkewAllowance = time.Hour
)

// Material is the broker's TLS identity.
type Material struct {
	Dir string // <data_dir>/tls

	CA    *x509.Certificate
	CAPEM []byte // ca.pem as on disk; what local trust publishes

	Leaf     tls.Certificate // chain [leaf, CA] with the leaf's private key
	LeafCert *x509.Certificate

	// CAFingerprintSHA256 is the lowercase hex SHA-256 of the CA's DER, without
	// colons: the value to print at start and for clients to pin.
	CAFingerprintSHA256 string
	// LeafFingerprintSHA256 is the same for the leaf; it changes when the leaf is
	// re-minted, which is why printing the CA's is preferred.
	LeafFingerprintSHA256 string
}

// ServerTLS returns a server configuration presenting the leaf and the CA.
// Listeners set ALPN and minimum versions on their own copies.
func (m *Material) ServerTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{m.Leaf},
		MinVersion:   tls.VersionTLS12,
	}
}

// FingerprintSHA256 returns the lowercase, colon-free hex SHA-256 of a DER
// certificate.
func FingerprintSHA256(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// FingerprintPEM returns the fingerprint of the first certificate in pemBytes
// (what `fibrilctl cert fingerprint <pem>` prints).
func FingerprintPEM(pemBytes []byte) (string, error) {
	cert, err := parseCertPEM(pemBytes)
	if err != nil {
		return "", err
	}
	return FingerprintSHA256(cert.Raw), nil
}

// LoadOrCreate loads the material under <dataDir>/tls, creating what is missing:
// the CA on first start, and a leaf covering localhost, 127.0.0.1, ::1, the
// host name and extraSANs (DNS names or IP literals).
func LoadOrCreate(dataDir string, extraSANs ...string) (*Material, error) {
	if dataDir == "" {
		return nil, errors.New("certs: data dir is empty")
	}
	dir := filepath.Join(dataDir, TLSDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("certs: create %s: %w", dir, err)
	}
	ca, caKey, caPEM, err := loadOrCreateCA(dir)
	if err != nil {
		return nil, err
	}
	sans := defaultSANs(extraSANs)
	leaf, leafKey, err := loadLeaf(dir)
	if err != nil || !leafUsable(leaf, ca, sans, time.Now()) {
		if caKey == nil {
			return nil, fmt.Errorf("certs: %s has no usable server leaf and no %s to mint one",
				dir, CAKeyFileName)
		}
		leaf, leafKey, err = mintLeaf(dir, ca, caKey, sans)
		if err != nil {
			return nil, err
		}
	}
	return newMaterial(dir, ca, caPEM, leaf, leafKey), nil
}

func newMaterial(dir string, ca *x509.Certificate, caPEM []byte, leaf *x509.Certificate,
	leafKey crypto.Signer) *Material {
	return &Material{
		Dir:   dir,
		CA:    ca,
		CAPEM: caPEM,
		Leaf: tls.Certificate{
			Certificate: [][]byte{leaf.Raw, ca.Raw},
			PrivateKey:  leafKey,
			Leaf:        leaf,
		},
		LeafCert:              leaf,
		CAFingerprintSHA256:   FingerprintSHA256(ca.Raw),
		LeafFingerprintSHA256: FingerprintSHA256(leaf.Raw),
	}
}

// loadOrCreateCA returns the CA; caKey is nil when only ca.pem exists (an
// operator-provided CA without its key, usable to verify but not to mint).
func loadOrCreateCA(dir string) (*x509.Certificate, crypto.Signer, []byte, error) {
	certPath := filepath.Join(dir, CACertFileName)
	keyPath := filepath.Join(dir, CAKeyFileName)
	caPEM, err := os.ReadFile(certPath)
	if errors.Is(err, os.ErrNotExist) {
		// A ca.key without ca.pem was never published (a crash between the two
		// writes), so replacing it invalidates nobody's pin.
		return createCA(dir)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("certs: read %s: %w", certPath, err)
	}
	ca, err := parseCertPEM(caPEM)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("certs: %s: %w", certPath, err)
	}
	if !ca.IsCA {
		return nil, nil, nil, fmt.Errorf("certs: %s is not a CA certificate", certPath)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if errors.Is(err, os.ErrNotExist) {
		return ca, nil, caPEM, nil
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("certs: read %s: %w", keyPath, err)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("certs: %s: %w", keyPath, err)
	}
	if !publicKeysEqual(key.Public(), ca.PublicKey) {
		return nil, nil, nil, fmt.Errorf("certs: %s does not match %s", keyPath, certPath)
	}
	return ca, key, caPEM, nil
}

// loadLeaf reads server.pem and server.key; any problem is an error, which makes
// the caller mint a fresh leaf.
func loadLeaf(dir string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, LeafFileName))
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, LeafKeyName))
	if err != nil {
		return nil, nil, err
	}
	leaf, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, nil, err
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, err
	}
	if !publicKeysEqual(key.Public(), leaf.PublicKey) {
		return nil, nil, errors.New("certs: server.key does not match server.pem")
	}
	return leaf, key, nil
}

// leafUsable: signed by ca, valid for at least leafRenewBefore, and naming every
// requested SAN.
func leafUsable(leaf, ca *x509.Certificate, sans []string, now time.Time) bool {
	if leaf == nil || leaf.CheckSignatureFrom(ca) != nil {
		return false
	}
	if now.Before(leaf.NotBefore) || now.Add(leafRenewBefore).After(leaf.NotAfter) {
		return false
	}
	for _, san := range sans {
		if !leafNames(leaf, san) {
			return false
		}
	}
	return true
}

func leafNames(leaf *x509.Certificate, san string) bool {
	if ip := parseIP(san); ip != nil {
		return slices.ContainsFunc(leaf.IPAddresses, ip.Equal)
	}
	return slices.Contains(leaf.DNSNames, san)
}

func parseCertPEM(pemBytes []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, pemBytes = pem.Decode(pemBytes)
		if block == nil {
			return nil, errors.New("no CERTIFICATE block in PEM")
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

func parseKeyPEM(pemBytes []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("no key block in PEM")
	}
	var key any
	var err error
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("unsupported private key type %T", key)
	}
	return signer, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ae, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ae.Equal(b)
}
