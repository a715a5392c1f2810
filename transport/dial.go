package transport

// Dialing, and turning handshake failures into errors that name the fix.
//
// Invariants:
//   - A returned Conn has finished its TLS (or QUIC) handshake; a failed handshake
//     never leaves a socket open.
//   - Certificate failures are *CertificateError (never retried: they need a
//     config change); a TLS handshake cut short by the peer is ErrTLSNotSupported.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// ErrTLSNotSupported: the TLS handshake ended early (EOF, reset, or a non-TLS
// reply), which is how a plaintext Fibril listener answers a ClientHello
// (PROTOCOL §1.4): it closes silently.
var ErrTLSNotSupported = errors.New("transport: the TLS handshake ended early: " +
	"the broker listener is probably plaintext; connect without TLS, or enable TLS on the broker")

// ErrCertificatePinMismatch: none of the certificates the broker presented matches
// the pinned SHA-256 fingerprint. Trust helpers (transport/certs) wrap it.
var ErrCertificatePinMismatch = errors.New("transport: no broker certificate matches the pinned SHA-256 fingerprint")

// CertificateError means the broker's certificate is not trusted. It is a
// configuration problem, never retried; its message says how to trust the broker.
type CertificateError struct {
	Addr string // the address dialed
	Err  error  // the verification failure
}

func (e *CertificateError) Error() string {
	return fmt.Sprintf("transport: the certificate of the broker at %s is not trusted: %v. "+
		"To trust a broker with self-signed material, either pass its CA file "+
		"(<data_dir>/tls/ca.pem on the broker host) as the CA file option, or pin its fingerprint: "+
		"run `fibrilctl cert fingerprint <data_dir>/tls/ca.pem` on the broker host (the broker also "+
		"prints it at start) and pass the hex value as the pinned SHA-256 option", e.Addr, e.Err)
}

func (e *CertificateError) Unwrap() error { return e.Err }

// DialTCP connects over TCP; with tlsConf it runs the TLS handshake before
// returning. An address without a port gets DefaultPort.
func DialTCP(ctx context.Context, addr string, tlsConf *tls.Config) (Conn, error) {
	addr = WithDefaultPort(addr)
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: dial tcp %s: %w", addr, err)
	}
	setNoDelay(nc)
	if tlsConf == nil {
		return newTCPConn(nc, nc, nil), nil
	}
	tc := tls.Client(nc, clientTLSConfig(tlsConf, addr, false))
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = nc.Close()
		return nil, classifyHandshakeError(addr, err)
	}
	return newTCPConn(tc, nc, tc), nil
}

// clientTLSConfig clones conf and fills what a dial needs: the server name from
// the address (for verification and SNI), TLS 1.2+ (1.3 and ALPN for QUIC).
func clientTLSConfig(conf *tls.Config, addr string, quic bool) *tls.Config {
	conf = conf.Clone()
	if conf.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			conf.ServerName = host
		}
	}
	if conf.MinVersion < tls.VersionTLS12 {
		conf.MinVersion = tls.VersionTLS12
	}
	if quic {
		conf.MinVersion = tls.VersionTLS13
		if len(conf.NextProtos) == 0 {
			conf.NextProtos = []string{ALPN}
		}
	}
	return conf
}

// classifyHandshakeError maps a failed client TLS handshake to a typed error.
func classifyHandshakeError(addr string, err error) error {
	if isCertificateFailure(err) {
		return &CertificateError{Addr: addr, Err: err}
	}
	var recordErr tls.RecordHeaderError
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &recordErr) {
		return fmt.Errorf("%w (%s: %v)", ErrTLSNotSupported, addr, err)
	}
	return fmt.Errorf("transport: TLS handshake with %s: %w", addr, err)
}

// isCertificateFailure reports whether err is a local verification failure of the
// broker's certificate (chain, name, or pin).
func isCertificateFailure(err error) bool {
	var verifyErr *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	return errors.As(err, &verifyErr) || errors.As(err, &unknownAuthority) ||
		errors.As(err, &hostnameErr) || errors.As(err, &invalidErr) ||
		errors.Is(err, ErrCertificatePinMismatch)
}
