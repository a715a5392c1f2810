// Package transport moves Fibril wire frames (package transport/wire) between a
// client and a broker over plaintext TCP, TLS over TCP, or QUIC, behind one Conn
// interface. quic-go never appears in its API.
//
// # Listeners
//
// ListenTCP serves one port as either plaintext or TLS. Each accepted connection
// is sniffed off the accept loop, per PROTOCOL §1.4: up to 20 bytes are read
// within 10 s (ListenConfig.SniffTimeout) and replayed afterwards.
//
//   - 0x16 0x03 (a TLS ClientHello) on a TLS listener: TLS handshake.
//   - 0x00 0x00 (a plaintext frame) on a TLS listener: one plaintext ERROR frame,
//     code 426, echoing the request id at bytes 12..20; then the socket is shut down.
//   - A ClientHello on a plaintext listener: closed, with a hint in the log.
//   - Silence for the sniff timeout, fewer than 2 bytes, or unknown bytes on a TLS
//     listener: closed silently.
//
// ListenQUIC serves the same protocol over QUIC (PROTOCOL §1.6): ALPN "fibril/1",
// TLS 1.3, no 0-RTT, keep-alives below the heartbeat. Accept returns a Conn over
// the first bidirectional stream the client opens; closing the stream or the
// connection is a disconnect. The default port, 9876, is the same number for TCP
// and UDP.
//
// # Dialing
//
// DialTCP (TLS when given a *tls.Config) and DialQUIC return a Conn after every
// handshake. A certificate the client does not trust fails with *CertificateError,
// whose message explains how to trust the broker. A TLS handshake that the peer cuts
// short fails with ErrTLSNotSupported: that is how a plaintext listener answers.
//
// # Trust (package transport/certs)
//
// A broker with auto-generated material keeps an ECDSA P-256 CA and a server leaf
// in <data_dir>/tls (certs.LoadOrCreate) and prints the CA's SHA-256 fingerprint.
// A client trusts it, in order of precedence, through:
//
//  1. a fingerprint pin (TrustOptions.PinnedSHA256): the leaf's, or the CA's with
//     path validation from the leaf to that CA and no hostname check;
//  2. a CA file (TrustOptions.CAFile): standard verification, hostname included
//     (TrustOptions.ServerName overrides the name);
//  3. local trust, for clients on the broker's own machine (below);
//  4. the OS roots, for brokers with publicly issued certificates.
//
// Local trust: "same machine, no certificate handling". When the broker loads or
// creates its material it calls certs.PublishLocalTrust(material, port), which
// writes its CA to <user config dir>/fibril/trust/<port>.pem, that is
// $XDG_CONFIG_HOME/fibril/trust/9876.pem or $HOME/.config/fibril/trust/9876.pem on
// Linux (os.UserConfigDir). A client dialing a loopback address (a loopback IP
// literal or "localhost"; names are never resolved for this decision) with neither
// a CA file nor a pin uses that file as its root (certs.ClientTLSConfigFor), with
// the usual chain and hostname verification: the generated leaf names localhost,
// 127.0.0.1 and ::1. Nothing else changes:
//
//   - Only loopback dials read the file. A remote client without a CA file or a pin
//     verifies against the OS roots and, for self-signed material, fails with
//     *CertificateError telling it to pass the CA file or pin the fingerprint
//     (`fibrilctl cert fingerprint <data_dir>/tls/ca.pem`).
//   - The file is per user: a client running as another user than the broker does
//     not see it and must be given a CA file or a pin.
//   - A trust file or directory writable by group or others is ignored, so another
//     local user cannot plant a CA for the port.
//   - The file holds only the public CA certificate. If another process takes over
//     the port, its certificate does not chain to that CA and the dial fails.
//
// InsecureSkipVerify is used only with a pin, and then always with a
// VerifyConnection callback that checks the pin.
package transport
