package certs

// Client trust: how a client decides to believe the broker's certificate.
//
// Invariants:
//   - InsecureSkipVerify is set only together with a VerifyConnection callback that
//     checks the pin; without a pin, Go's standard verification always runs.
//   - Precedence: pin > CA file > local trust file (loopback only) > OS roots.
//   - A CA pin validates the path leaf → pinned CA (no hostname check); a leaf pin
//     is an exact identity match.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/fibril-go/fibril/transport"
)

// TrustOptions says how a client trusts the broker. The zero value means the OS
// roots (plus, through ClientTLSConfigFor, the local trust file on loopback).
type TrustOptions struct {
	// CAFile is a PEM file of CA certificates to trust (the broker's ca.pem).
	CAFile string
	// PinnedSHA256 is the hex SHA-256 of the broker's leaf or CA certificate, as
	// printed by the broker or `fibrilctl cert fingerprint`. Colons, spaces and
	// case are ignored.
	PinnedSHA256 string
	// ServerName overrides the name used for SNI and hostname verification.
	ServerName string
	// ClientCert is presented when the broker requests mTLS.
	ClientCert *tls.Certificate
}

// IsZero reports whether no trust option is set.
func (o TrustOptions) IsZero() bool {
	return o.CAFile == "" && o.PinnedSHA256 == "" && o.ServerName == "" && o.ClientCert == nil
}

// ClientTLSConfig builds a client configuration from opts.
func ClientTLSConfig(opts TrustOptions) (*tls.Config, error) {
	conf := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: opts.ServerName,
	}
	if opts.ClientCert != nil {
		conf.Certificates = []tls.Certificate{*opts.ClientCert}
	}
	switch {
	case opts.PinnedSHA256 != "":
		pin, err := NormalizeFingerprint(opts.PinnedSHA256)
		if err != nil {
			return nil, err
		}
		// Standard verification would demand a hostname match and a known root;
		// the pin replaces both, and VerifyConnection enforces it.
		conf.InsecureSkipVerify = true
		conf.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyPin(cs.PeerCertificates, pin)
		}
	case opts.CAFile != "":
		pemBytes, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("certs: read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("certs: %s holds no PEM certificate", opts.CAFile)
		}
		conf.RootCAs = pool
	}
	return conf, nil
}

// ClientTLSConfigFor is ClientTLSConfig for a dial to addr. When opts names no
// CA file and no pin, and addr is a loopback address, it trusts the CA that a
// broker on this machine published for addr's port (PublishLocalTrust), if any.
// Remote addresses never use the local trust file.
func ClientTLSConfigFor(addr string, opts TrustOptions) (*tls.Config, error) {
	conf, err := ClientTLSConfig(opts)
	if err != nil {
		return nil, err
	}
	if opts.CAFile != "" || opts.PinnedSHA256 != "" {
		return conf, nil
	}
	host, portText, err := net.SplitHostPort(transport.WithDefaultPort(addr))
	if err != nil || !transport.IsLoopbackHost(host) {
		return conf, nil
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return conf, nil
	}
	caPEM, ok := LocalTrust(port)
	if !ok {
		return conf, nil
	}
	pool := x509.NewCertPool()
	if pool.AppendCertsFromPEM(caPEM) {
		conf.RootCAs = pool
	}
	return conf, nil
}

// NormalizeFingerprint lowercases a hex SHA-256 fingerprint and strips colons
// and spaces; it fails unless 64 hex digits remain.
func NormalizeFingerprint(fingerprint string) (string, error) {
	f := strings.ToLower(strings.NewReplacer(":", "", " ", "", "-", "").Replace(fingerprint))
	if len(f) != 64 {
		return "", fmt.Errorf("certs: a SHA-256 fingerprint has 64 hex digits, got %d", len(f))
	}
	if _, err := hex.DecodeString(f); err != nil {
		return "", fmt.Errorf("certs: fingerprint is not hex: %w", err)
	}
	return f, nil
}

// verifyPin accepts the chain when the leaf matches pin, or when a certificate
// further up matches pin and the leaf chains to it (no hostname check).
func verifyPin(chain []*x509.Certificate, pin string) error {
	if len(chain) == 0 {
		return fmt.Errorf("%w: the broker presented no certificate", transport.ErrCertificatePinMismatch)
	}
	leaf := chain[0]
	if FingerprintSHA256(leaf.Raw) == pin {
		return nil
	}
	for i, cert := range chain[1:] {
		if FingerprintSHA256(cert.Raw) != pin {
			continue
		}
		roots := x509.NewCertPool()
		roots.AddCert(cert)
		intermediates := x509.NewCertPool()
		for _, mid := range chain[1 : i+1] {
			intermediates.AddCert(mid)
		}
		_, err := leaf.Verify(x509.VerifyOptions{
			Roots:         roots,
			Intermediates: intermediates,
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			return fmt.Errorf("%w: the pinned CA was presented but the leaf does not validate against it: %w",
				transport.ErrCertificatePinMismatch, err)
		}
		return nil
	}
	return fmt.Errorf("%w: broker leaf is %s", transport.ErrCertificatePinMismatch, FingerprintSHA256(leaf.Raw))
}

// errNoLocalTrustDir: the user has no config directory (no $HOME).
var errNoLocalTrustDir = errors.New("certs: no user config directory for local trust")
