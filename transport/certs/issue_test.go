package certs_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/transport/certs"
)

func TestIssueClient(t *testing.T) {
	dataDir := t.TempDir()
	m, err := certs.LoadOrCreate(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "clients")
	issued, err := certs.IssueClient(dataDir, "alice", out, false)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(issued.CertPath, issued.KeyPath)
	if err != nil {
		t.Fatalf("the issued files are no key pair: %v", err)
	}
	if len(pair.Certificate) != 2 {
		t.Fatalf("chain of %d certificates, want leaf + CA", len(pair.Certificate))
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	roots := x509.NewCertPool()
	roots.AddCert(m.CA)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("not a client certificate of the CA: %v", err)
	}
	if leaf.DNSNames[0] != "alice" || leaf.Subject.CommonName != "alice" || certs.FingerprintSHA256(leaf.Raw) != issued.FingerprintSHA256 {
		t.Fatalf("identity %v / %q, fingerprint %s", leaf.DNSNames, leaf.Subject.CommonName, issued.FingerprintSHA256)
	}
	// The CA was only read.
	again, _ := certs.LoadOrCreate(dataDir)
	if again.CAFingerprintSHA256 != m.CAFingerprintSHA256 {
		t.Fatal("issuing changed the CA")
	}
	if _, err := certs.IssueClient(dataDir, "alice", out, false); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("issue over existing files: %v", err)
	}
	if _, err := certs.IssueClient(dataDir, "alice", out, true); err != nil {
		t.Fatalf("issue with overwrite: %v", err)
	}
	for _, bad := range []string{"", "@node", "a b", "x/y", strings.Repeat("a", 254)} {
		if _, err := certs.IssueClient(dataDir, bad, out, false); err == nil {
			t.Errorf("identity %q was accepted", bad)
		}
	}
	// A CA without its key verifies but cannot issue.
	if err := os.Remove(filepath.Join(dataDir, "tls", "ca.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := certs.IssueClient(dataDir, "bob", out, false); err == nil || !strings.Contains(err.Error(), "ca.key") {
		t.Fatalf("issue without ca.key: %v", err)
	}
	if _, err := certs.IssueClient(t.TempDir(), "bob", out, false); err == nil || !strings.Contains(err.Error(), "no CA") {
		t.Fatalf("issue without a CA: %v", err)
	}
}
