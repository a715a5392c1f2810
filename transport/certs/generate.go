package certs

// Minting the CA and the server leaf, and writing them to disk.
//
// Invariants:
//   - Keys are ECDSA P-256, written as PKCS#8 with mode 0600; certificates 0644.
//   - A key is always written before its certificate: a crash in between leaves a
//     key with no certificate, which the next start replaces, never a certificate
//     whose key is lost.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// defaultSANs returns the names every generated leaf carries, then extra.
func defaultSANs(extra []string) []string {
	sans := []string{"localhost", "127.0.0.1", "::1"}
	if host, err := os.Hostname(); err == nil && host != "" {
		sans = append(sans, strings.ToLower(host))
	}
	for _, san := range extra {
		san = strings.TrimSpace(san)
		if san != "" {
			sans = append(sans, san)
		}
	}
	slices.Sort(sans)
	return slices.Compact(sans)
}

func createCA(dir string) (*x509.Certificate, crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("certs: generate CA key: %w", err)
	}
	host, _ := os.Hostname()
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "Fibril broker CA " + host, Organization: []string{"Fibril"}},
		NotBefore:             now.Add(-clockSkewAllowance),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // signs leaves only
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("certs: create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := writeKeyAndCert(dir, CAKeyFileName, CACertFileName, key, certPEM); err != nil {
		return nil, nil, nil, err
	}
	return ca, key, certPEM, nil
}

func mintLeaf(dir string, ca *x509.Certificate, caKey crypto.Signer, sans []string) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: generate server key: %w", err)
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: "fibril-broker", Organization: []string{"Fibril"}},
		NotBefore:    now.Add(-clockSkewAllowance),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// ClientAuth too: brokers present the same leaf on inter-broker links (SPEC §10).
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, san := range sans {
		if ip := parseIP(san); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, san)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: create server certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := writeKeyAndCert(dir, LeafKeyName, LeafFileName, key, certPEM); err != nil {
		return nil, nil, err
	}
	return leaf, key, nil
}

func writeKeyAndCert(dir, keyName, certName string, key crypto.Signer, certPEM []byte) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("certs: encode %s: %w", keyName, err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := writeFileAtomic(filepath.Join(dir, keyName), keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, certName), certPEM, 0o644)
}

// writeFileAtomic replaces path with data: temp file, fsync, rename, fsync dir.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	tmpPath := tmp.Name()
	defer os.Remove(tmpPath) // a no-op after the rename
	if err := tmp.Chmod(perm); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("certs: chmod %s: %w", tmpPath, err)
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("certs: write %s: %w", tmpPath, err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("certs: sync %s: %w", tmpPath, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("certs: close %s: %w", tmpPath, err)
	}
	if err := os.Rename(tmpPath, path); err != nil {
		return fmt.Errorf("certs: rename to %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

func randomSerial() *big.Int {
	limit := new(big.Int).Lsh(big.NewInt(1), 127)
	serial, err := rand.Int(rand.Reader, limit)
	if err != nil {
		panic("certs: crypto/rand failed: " + err.Error())
	}
	return serial.Add(serial, big.NewInt(1)) // never zero
}

func parseIP(s string) net.IP {
	return net.ParseIP(strings.Trim(s, "[]"))
}
