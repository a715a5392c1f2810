package certs

// Client identities for mTLS (`fibrilctl cert issue`, SPEC 10): a leaf for a
// user, signed by the broker's generated CA, that the broker maps to the user
// of the same name (its first DNS SAN, else its CN).
//
// Invariants:
//   - The CA is only read: issuing never creates or rewrites ca.pem or ca.key,
//     so no pin changes. A data dir without ca.key cannot issue.
//   - The identity is a user name, never an `@` name (those are reserved for
//     nodes and never map to a user).
//   - The key is written before the certificate, 0600; existing files are
//     refused unless overwrite is set.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// clientValidity is how long an issued client certificate is valid.
const clientValidity = 397 * 24 * time.Hour

// identityBytesMax bounds an identity: a DNS label is at most 63 bytes, a
// DNS name 253.
const identityBytesMax = 253

// IssuedClient names the files IssueClient wrote.
type IssuedClient struct {
	CertPath          string
	KeyPath           string
	FingerprintSHA256 string
	NotAfter          time.Time
}

// ValidateIdentity checks that identity can name a user in a client
// certificate.
func ValidateIdentity(identity string) error {
	switch {
	case identity == "":
		return errors.New("certs: the identity is empty; give the user name the certificate stands for")
	case len(identity) > identityBytesMax:
		return fmt.Errorf("certs: the identity is over %d bytes", identityBytesMax)
	case strings.HasPrefix(identity, "@"):
		return fmt.Errorf("certs: %q: @ names are reserved for nodes and never map to a user", identity)
	}
	for _, c := range identity {
		ok := c == '-' || c == '.' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			return fmt.Errorf("certs: %q: an identity is letters, digits, '-', '_' and '.' (it travels as a DNS name)", identity)
		}
	}
	return nil
}

// IssueClient signs a client certificate for identity with the CA under
// <dataDir>/tls and writes <outDir>/<identity>.pem (leaf then CA) and
// <outDir>/<identity>.key.
func IssueClient(dataDir, identity, outDir string, overwrite bool) (IssuedClient, error) {
	if err := ValidateIdentity(identity); err != nil {
		return IssuedClient{}, err
	}
	dir := filepath.Join(dataDir, TLSDirName)
	if _, err := os.Stat(filepath.Join(dir, CACertFileName)); err != nil {
		return IssuedClient{}, fmt.Errorf("certs: no CA in %s (run 'fibrilctl cert generate --data-dir %s' or start the broker with TLS first): %w",
			dir, dataDir, err)
	}
	ca, caKey, _, err := loadOrCreateCA(dir)
	if err != nil {
		return IssuedClient{}, err
	}
	if caKey == nil {
		return IssuedClient{}, fmt.Errorf("certs: %s has no %s; only the CA's owner can issue client certificates", dir, CAKeyFileName)
	}
	issued := IssuedClient{
		CertPath: filepath.Join(outDir, identity+".pem"),
		KeyPath:  filepath.Join(outDir, identity+".key"),
	}
	if !overwrite {
		for _, path := range []string{issued.CertPath, issued.KeyPath} {
			if _, err := os.Stat(path); err == nil {
				return IssuedClient{}, fmt.Errorf("certs: %s exists; remove it or pass --force", path)
			}
		}
	}
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return IssuedClient{}, fmt.Errorf("certs: create %s: %w", outDir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return IssuedClient{}, fmt.Errorf("certs: generate client key: %w", err)
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: identity, Organization: []string{"Fibril"}},
		DNSNames:     []string{identity},
		NotBefore:    now.Add(-clockSkewAllowance),
		NotAfter:     now.Add(clientValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, key.Public(), caKey)
	if err != nil {
		return IssuedClient{}, fmt.Errorf("certs: create client certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return IssuedClient{}, err
	}
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})...)
	if err := writeKeyAndCert(outDir, identity+".key", identity+".pem", key, chain); err != nil {
		return IssuedClient{}, err
	}
	issued.FingerprintSHA256 = FingerprintSHA256(der)
	issued.NotAfter = leaf.NotAfter
	return issued, nil
}
