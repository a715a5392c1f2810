package certs_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fibril-go/fibril/transport"
	"github.com/fibril-go/fibril/transport/certs"
)

func TestMaterialCreatedThenReused(t *testing.T) {
	dataDir := t.TempDir()
	first, err := certs.LoadOrCreate(dataDir)
	if err != nil {
		t.Fatalf("first LoadOrCreate: %v", err)
	}
	dir := filepath.Join(dataDir, "tls")
	for name, perm := range map[string]os.FileMode{"ca.key": 0o600, "server.key": 0o600, "ca.pem": 0o644, "server.pem": 0o644} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if info.Mode().Perm() != perm {
			t.Fatalf("%s has mode %v, want %v", name, info.Mode().Perm(), perm)
		}
	}
	if first.CA.PublicKeyAlgorithm != x509.ECDSA || first.CA.PublicKey.(*ecdsa.PublicKey).Curve != elliptic.P256() {
		t.Fatal("CA key is not ECDSA P-256")
	}
	if len(first.CAFingerprintSHA256) != 64 {
		t.Fatalf("fingerprint %q is not 64 hex digits", first.CAFingerprintSHA256)
	}
	leaf := first.LeafCert
	for _, name := range []string{"localhost"} {
		if !slices.Contains(leaf.DNSNames, name) {
			t.Fatalf("leaf DNS names %v lack %q", leaf.DNSNames, name)
		}
	}
	for _, ip := range []string{"127.0.0.1", "::1"} {
		if !slices.ContainsFunc(leaf.IPAddresses, net.ParseIP(ip).Equal) {
			t.Fatalf("leaf IPs %v lack %s", leaf.IPAddresses, ip)
		}
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		if err := leaf.VerifyHostname(host); err != nil {
			t.Fatalf("leaf does not name the host: %v", err)
		}
	}

	again, err := certs.LoadOrCreate(dataDir)
	if err != nil {
		t.Fatalf("second LoadOrCreate: %v", err)
	}
	if again.CAFingerprintSHA256 != first.CAFingerprintSHA256 || again.LeafFingerprintSHA256 != first.LeafFingerprintSHA256 {
		t.Fatal("material was regenerated on the second start")
	}

	// A new SAN re-mints the leaf from the same CA: pins of the CA stay valid.
	withSAN, err := certs.LoadOrCreate(dataDir, "broker.example", "10.1.2.3")
	if err != nil {
		t.Fatalf("LoadOrCreate with SANs: %v", err)
	}
	if withSAN.CAFingerprintSHA256 != first.CAFingerprintSHA256 {
		t.Fatal("adding a SAN replaced the CA")
	}
	if withSAN.LeafFingerprintSHA256 == first.LeafFingerprintSHA256 {
		t.Fatal("adding a SAN did not re-mint the leaf")
	}
	if err := withSAN.LeafCert.VerifyHostname("broker.example"); err != nil {
		t.Fatalf("re-minted leaf: %v", err)
	}
	if err := withSAN.LeafCert.VerifyHostname("10.1.2.3"); err != nil {
		t.Fatalf("re-minted leaf: %v", err)
	}
	if err := withSAN.LeafCert.CheckSignatureFrom(first.CA); err != nil {
		t.Fatalf("re-minted leaf is not signed by the CA: %v", err)
	}
	if len(withSAN.Leaf.Certificate) != 2 {
		t.Fatalf("served chain has %d certificates, want leaf + CA", len(withSAN.Leaf.Certificate))
	}

	pemBytes, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	fp, err := certs.FingerprintPEM(pemBytes)
	if err != nil || fp != first.CAFingerprintSHA256 {
		t.Fatalf("FingerprintPEM = %q, %v; want %q", fp, err, first.CAFingerprintSHA256)
	}
}

// A data dir holding only the CA pair mints its own leaf (SPEC §10).
func TestMaterialMintsLeafFromCAOnly(t *testing.T) {
	dataDir := t.TempDir()
	first, err := certs.LoadOrCreate(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"server.pem", "server.key"} {
		if err := os.Remove(filepath.Join(dataDir, "tls", name)); err != nil {
			t.Fatal(err)
		}
	}
	again, err := certs.LoadOrCreate(dataDir)
	if err != nil {
		t.Fatalf("LoadOrCreate with CA only: %v", err)
	}
	if again.CAFingerprintSHA256 != first.CAFingerprintSHA256 {
		t.Fatal("CA changed")
	}
}

func TestLocalTrustOnLoopbackOnly(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	m, err := certs.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := transport.ListenTCP("127.0.0.1:0", m.ServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, ok := certs.LocalTrust(port); ok {
		t.Fatal("LocalTrust found a file before PublishLocalTrust")
	}
	path, err := certs.PublishLocalTrust(m, port)
	if err != nil {
		t.Fatalf("PublishLocalTrust: %v", err)
	}
	if got, _ := certs.LocalTrustPath(port); got != path || filepath.Base(path) != strconv.Itoa(port)+".pem" {
		t.Fatalf("published to %q, LocalTrustPath says %q", path, got)
	}

	for _, host := range []string{"127.0.0.1", "localhost"} {
		conf, err := certs.ClientTLSConfigFor(host+":"+strconv.Itoa(port), certs.TrustOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if conf.RootCAs == nil {
			t.Fatalf("%s: loopback dial did not pick up local trust", host)
		}
	}
	conf, _ := certs.ClientTLSConfigFor(addr, certs.TrustOptions{})
	c, err := transport.DialTCP(ctx, addr, conf)
	if err != nil {
		t.Fatalf("dial with local trust: %v", err)
	}
	_ = c.Close()

	// A remote address never reads the local trust file.
	remote, err := certs.ClientTLSConfigFor("192.0.2.10:"+strconv.Itoa(port), certs.TrustOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if remote.RootCAs != nil {
		t.Fatal("a remote dial used the local trust file")
	}

	// A trust file others can write is ignored.
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, ok := certs.LocalTrust(port); ok {
		t.Fatal("a world-writable trust file was accepted")
	}
}
