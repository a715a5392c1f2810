package transport_test

// Loopback integration tests of the listeners, dialers, first-bytes sniffing and
// trust. Every socket is on 127.0.0.1; no test sleeps for correctness: waits are
// bounded by deadlines or contexts.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/internal/syncbuf"
	"github.com/fibril-go/fibril/transport"
	"github.com/fibril-go/fibril/transport/certs"
	"github.com/fibril-go/fibril/transport/wire"
)

const testTimeout = 10 * time.Second

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// testMaterial creates broker material in a temporary data dir.
func testMaterial(t *testing.T) (*certs.Material, string) {
	t.Helper()
	dataDir := t.TempDir()
	m, err := certs.LoadOrCreate(dataDir)
	if err != nil {
		t.Fatalf("LoadOrCreate: %v", err)
	}
	return m, dataDir
}

func caFileTrust(t *testing.T, m *certs.Material) *tls.Config {
	t.Helper()
	conf, err := certs.ClientTLSConfig(certs.TrustOptions{CAFile: filepath.Join(m.Dir, certs.CACertFileName)})
	if err != nil {
		t.Fatalf("ClientTLSConfig: %v", err)
	}
	return conf
}

func quietConfig() (transport.ListenConfig, *syncbuf.Buffer) {
	logs := &syncbuf.Buffer{}
	return transport.ListenConfig{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, logs
}

func listenTCP(t *testing.T, lc transport.ListenConfig, tlsConf *tls.Config) transport.Listener {
	t.Helper()
	ln, err := lc.ListenTCP("127.0.0.1:0", tlsConf)
	if err != nil {
		t.Fatalf("ListenTCP: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

func listenQUIC(t *testing.T, lc transport.ListenConfig, tlsConf *tls.Config) transport.Listener {
	t.Helper()
	ln, err := lc.ListenQUIC("127.0.0.1:0", tlsConf)
	if err != nil {
		t.Fatalf("ListenQUIC: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

func helloFrame(requestID uint64) []byte {
	return wire.AppendBodyFrame(nil, wire.OpHello, requestID, wire.Hello{
		ClientName: "test", ClientVersion: "0", ProtocolVersion: wire.ProtocolVersion,
	})
}

func readFrame(t *testing.T, r *bufio.Reader) (wire.Header, []byte) {
	t.Helper()
	h, payload, err := wire.ReadFrame(r, wire.PayloadSizeBytesMaxDefault, nil)
	if err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	return h, payload
}

// roundTrip sends a HELLO from the dialed side, has the accepted side echo a PING
// with the same request id, and checks both directions.
func roundTrip(t *testing.T, ln transport.Listener, client transport.Conn) transport.Conn {
	t.Helper()
	ctx := testContext(t)
	if _, err := client.Write(helloFrame(7)); err != nil {
		t.Fatalf("client write: %v", err)
	}
	server, err := ln.Accept(ctx)
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	t.Cleanup(func() { _ = server.Close() })
	h, payload := readFrame(t, bufio.NewReader(server))
	if h.Opcode != wire.OpHello || h.RequestID != 7 {
		t.Fatalf("server read %v id %d, want HELLO id 7", h.Opcode, h.RequestID)
	}
	if _, err := wire.DecodeHello(payload); err != nil {
		t.Fatalf("decode HELLO: %v", err)
	}
	if _, err := server.Write(wire.AppendBodyFrame(nil, wire.OpPing, 7, wire.Ping{})); err != nil {
		t.Fatalf("server write: %v", err)
	}
	h, _ = readFrame(t, bufio.NewReader(client))
	if h.Opcode != wire.OpPing || h.RequestID != 7 {
		t.Fatalf("client read %v id %d, want PING id 7", h.Opcode, h.RequestID)
	}
	if !server.IsLoopback() || !client.IsLoopback() {
		t.Fatalf("IsLoopback = %v/%v on 127.0.0.1", server.IsLoopback(), client.IsLoopback())
	}
	return server
}

func TestTCPPlaintextRoundTrip(t *testing.T) {
	lc, _ := quietConfig()
	ln := listenTCP(t, lc, nil)
	client, err := transport.DialTCP(testContext(t), ln.Addr().String(), nil)
	if err != nil {
		t.Fatalf("DialTCP: %v", err)
	}
	defer client.Close()
	server := roundTrip(t, ln, client)
	if server.Kind() != transport.KindTCP || client.Kind() != transport.KindTCP {
		t.Fatalf("kinds %q/%q, want tcp", server.Kind(), client.Kind())
	}
	if _, ok := transport.TLSState(server); ok {
		t.Fatal("TLSState reported TLS on a plaintext conn")
	}
}

func TestTLSRoundTrip(t *testing.T) {
	m, _ := testMaterial(t)
	lc, _ := quietConfig()
	ln := listenTCP(t, lc, m.ServerTLS())
	client, err := transport.DialTCP(testContext(t), ln.Addr().String(), caFileTrust(t, m))
	if err != nil {
		t.Fatalf("DialTCP: %v", err)
	}
	defer client.Close()
	server := roundTrip(t, ln, client)
	if server.Kind() != transport.KindTLS || client.Kind() != transport.KindTLS {
		t.Fatalf("kinds %q/%q, want tls", server.Kind(), client.Kind())
	}
	state, ok := transport.TLSState(server)
	if !ok || !state.HandshakeComplete {
		t.Fatal("TLSState: no completed handshake on the server side")
	}
}

// A plaintext HELLO on a TLS listener gets one plaintext ERROR 426 echoing its
// request id, and then an orderly end of stream (not a reset, although the
// HELLO body is still unread on the broker side when it closes).
func TestPlaintextHelloOnTLSListenerGets426(t *testing.T) {
	m, _ := testMaterial(t)
	lc, _ := quietConfig()
	ln := listenTCP(t, lc, m.ServerTLS())

	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(testTimeout))
	const requestID = 0x0102030405060708
	if _, err := raw.Write(helloFrame(requestID)); err != nil {
		t.Fatalf("write: %v", err)
	}
	r := bufio.NewReader(raw)
	h, payload := readFrame(t, r)
	if h.Opcode != wire.OpError || h.RequestID != requestID || h.Version != 1 || h.Flags != 0 {
		t.Fatalf("got header %+v, want ERROR with request id %#x", h, uint64(requestID))
	}
	body, err := wire.DecodeErrorBody(payload)
	if err != nil {
		t.Fatalf("decode error body: %v", err)
	}
	if body.Code != wire.CodeTLSRequired || !strings.Contains(body.Message, "TLS") {
		t.Fatalf("error body %+v, want 426 naming TLS", body)
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the 426 frame: %v, want EOF", err)
	}
	// The rejected connection is never handed to Accept.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if c, err := ln.Accept(ctx); err == nil {
		t.Fatalf("Accept returned the rejected connection %v", c.RemoteAddr())
	}
}

// The same through the package's own dialer: a plaintext Conn sees 426 then EOF.
func TestPlaintextDialOnTLSListener(t *testing.T) {
	m, _ := testMaterial(t)
	lc, _ := quietConfig()
	ln := listenTCP(t, lc, m.ServerTLS())
	client, err := transport.DialTCP(testContext(t), ln.Addr().String(), nil)
	if err != nil {
		t.Fatalf("DialTCP: %v", err)
	}
	defer client.Close()
	if _, err := client.Write(helloFrame(1)); err != nil {
		t.Fatalf("write: %v", err)
	}
	r := bufio.NewReader(client)
	h, _ := readFrame(t, r)
	if h.Opcode != wire.OpError || h.RequestID != 1 {
		t.Fatalf("got %v id %d, want ERROR id 1", h.Opcode, h.RequestID)
	}
	if _, _, err := wire.ReadFrame(r, wire.PayloadSizeBytesMaxDefault, nil); !errors.Is(err, io.EOF) {
		t.Fatalf("after 426: %v, want EOF", err)
	}
}

func TestTLSClientHelloOnPlaintextListenerIsClosed(t *testing.T) {
	m, _ := testMaterial(t)
	lc, logs := quietConfig()
	ln := listenTCP(t, lc, nil)
	_, err := transport.DialTCP(testContext(t), ln.Addr().String(), caFileTrust(t, m))
	if !errors.Is(err, transport.ErrTLSNotSupported) {
		t.Fatalf("DialTCP with TLS to a plaintext listener: %v, want ErrTLSNotSupported", err)
	}
	if !strings.Contains(logs.String(), "ClientHello reached the plaintext listener") {
		t.Fatalf("no hint logged; logs:\n%s", logs.String())
	}
}

// A silent client is closed after the sniff timeout, and meanwhile it does not
// delay other clients.
func TestSilentClientClosedAfterSniffTimeout(t *testing.T) {
	lc, _ := quietConfig()
	lc.SniffTimeout = 150 * time.Millisecond
	ln := listenTCP(t, lc, nil)

	start := time.Now() // before the dial: the sniff deadline starts at accept
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer silent.Close()

	// Another client connects after the silent one and is served at once.
	client, err := transport.DialTCP(testContext(t), ln.Addr().String(), nil)
	if err != nil {
		t.Fatalf("DialTCP: %v", err)
	}
	defer client.Close()
	roundTrip(t, ln, client)
	if elapsed := time.Since(start); elapsed >= lc.SniffTimeout {
		t.Fatalf("second client served after %v: blocked behind the silent one", elapsed)
	}

	_ = silent.SetReadDeadline(time.Now().Add(testTimeout))
	n, err := silent.Read(make([]byte, 1))
	if n != 0 || err == nil {
		t.Fatalf("silent client read %d bytes, err %v; want closed", n, err)
	}
	if elapsed := time.Since(start); elapsed < lc.SniffTimeout {
		t.Fatalf("silent client closed after %v, before the %v sniff timeout", elapsed, lc.SniffTimeout)
	}
}

// A short first flight then EOF (fewer than 2 bytes) is closed silently, and a
// frame shorter than a header on a TLS listener still gets 426 with request id 0.
func TestSniffShortFlights(t *testing.T) {
	m, _ := testMaterial(t)
	lc, _ := quietConfig()
	ln := listenTCP(t, lc, m.ServerTLS())

	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(testTimeout))
	_, _ = raw.Write([]byte{0x00, 0x00, 0x00})
	_ = raw.(*net.TCPConn).CloseWrite()
	h, _ := readFrame(t, bufio.NewReader(raw))
	if h.Opcode != wire.OpError || h.RequestID != 0 {
		t.Fatalf("got %v id %d, want ERROR id 0", h.Opcode, h.RequestID)
	}

	one, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer one.Close()
	_ = one.SetDeadline(time.Now().Add(testTimeout))
	_, _ = one.Write([]byte{0x00})
	_ = one.(*net.TCPConn).CloseWrite()
	if n, err := one.Read(make([]byte, 64)); n != 0 || err == nil {
		t.Fatalf("one-byte client read %d bytes, err %v; want a silent close", n, err)
	}
}

// Close after a write delivers the write and then EOF, even with unread input
// pending on the closing side (which would otherwise turn FIN into a reset).
func TestCloseDeliversLastFrame(t *testing.T) {
	lc, _ := quietConfig()
	ln := listenTCP(t, lc, nil)
	client, err := transport.DialTCP(testContext(t), ln.Addr().String(), nil)
	if err != nil {
		t.Fatalf("DialTCP: %v", err)
	}
	defer client.Close()
	// Two frames; the server reads neither body before closing.
	_, _ = client.Write(append(helloFrame(1), helloFrame(2)...))
	server, err := ln.Accept(testContext(t))
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	_, _ = server.Write(wire.AppendBodyFrame(nil, wire.OpError, 1,
		wire.ErrorBody{Code: wire.CodeUnauthorized, Message: "authentication required"}))
	_ = server.Close()
	if _, err := server.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
	}
	r := bufio.NewReader(client)
	h, _ := readFrame(t, r)
	if h.Opcode != wire.OpError {
		t.Fatalf("got %v, want the ERROR written before Close", h.Opcode)
	}
	if _, _, err := wire.ReadFrame(r, wire.PayloadSizeBytesMaxDefault, nil); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

func TestListenerCloseEndsAccept(t *testing.T) {
	lc, _ := quietConfig()
	ln, err := lc.ListenTCP("127.0.0.1:0", nil)
	if err != nil {
		t.Fatalf("ListenTCP: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ln.Accept(context.Background())
		done <- err
	}()
	_ = ln.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Accept did not return after Close")
	}
}

func TestQUICRoundTripWithALPN(t *testing.T) {
	m, _ := testMaterial(t)
	lc, _ := quietConfig()
	ln := listenQUIC(t, lc, m.ServerTLS())
	client, err := transport.DialQUIC(testContext(t), ln.Addr().String(), caFileTrust(t, m))
	if err != nil {
		t.Fatalf("DialQUIC: %v", err)
	}
	defer client.Close()
	server := roundTrip(t, ln, client)
	if server.Kind() != transport.KindQUIC || client.Kind() != transport.KindQUIC {
		t.Fatalf("kinds %q/%q, want quic", server.Kind(), client.Kind())
	}
	state, ok := transport.TLSState(server)
	if !ok || state.NegotiatedProtocol != transport.ALPN || state.Version != tls.VersionTLS13 {
		t.Fatalf("server TLS state: ok=%v alpn=%q version=%#x", ok, state.NegotiatedProtocol, state.Version)
	}

	// Closing one side is a disconnect for the other: the last frame, then EOF.
	_, _ = server.Write(wire.AppendBodyFrame(nil, wire.OpPong, 9, wire.Pong{}))
	_ = server.Close()
	r := bufio.NewReader(client)
	h, _ := readFrame(t, r)
	if h.Opcode != wire.OpPong {
		t.Fatalf("got %v, want the PONG written before Close", h.Opcode)
	}
	if _, _, err := wire.ReadFrame(r, wire.PayloadSizeBytesMaxDefault, nil); !errors.Is(err, io.EOF) {
		t.Fatalf("after close: %v, want EOF", err)
	}
}

func TestQUICWrongALPNRefused(t *testing.T) {
	m, _ := testMaterial(t)
	lc, _ := quietConfig()
	ln := listenQUIC(t, lc, m.ServerTLS())
	conf := caFileTrust(t, m)
	conf.NextProtos = []string{"h3"}
	client, err := transport.DialQUIC(testContext(t), ln.Addr().String(), conf)
	if err == nil {
		client.Close()
		t.Fatal("DialQUIC with ALPN h3 succeeded; want a refused handshake")
	}
	if !strings.Contains(err.Error(), "application protocol") {
		t.Fatalf("DialQUIC error %v does not name the ALPN mismatch", err)
	}
}

func TestPinnedFingerprints(t *testing.T) {
	m, _ := testMaterial(t)
	lc, _ := quietConfig()
	tcpLn := listenTCP(t, lc, m.ServerTLS())
	quicLn := listenQUIC(t, lc, m.ServerTLS())
	dialers := map[string]struct {
		addr string
		dial func(context.Context, string, *tls.Config) (transport.Conn, error)
	}{
		"tcp":  {tcpLn.Addr().String(), transport.DialTCP},
		"quic": {quicLn.Addr().String(), transport.DialQUIC},
	}
	colonned := strings.ToUpper(m.CAFingerprintSHA256[:2]) + ":" + m.CAFingerprintSHA256[2:]
	pins := map[string]string{
		"ca":            m.CAFingerprintSHA256,
		"leaf":          m.LeafFingerprintSHA256,
		"ca with colon": colonned,
	}
	for name, d := range dialers {
		for pinName, pin := range pins {
			t.Run(name+"/"+pinName, func(t *testing.T) {
				// ServerName deliberately wrong: a pin does no hostname check.
				conf, err := certs.ClientTLSConfig(certs.TrustOptions{PinnedSHA256: pin, ServerName: "not-the-broker.example"})
				if err != nil {
					t.Fatalf("ClientTLSConfig: %v", err)
				}
				c, err := d.dial(testContext(t), d.addr, conf)
				if err != nil {
					t.Fatalf("dial with %s pin: %v", pinName, err)
				}
				_ = c.Close()
			})
		}
		t.Run(name+"/wrong pin", func(t *testing.T) {
			conf, err := certs.ClientTLSConfig(certs.TrustOptions{PinnedSHA256: strings.Repeat("ab", 32)})
			if err != nil {
				t.Fatalf("ClientTLSConfig: %v", err)
			}
			c, err := d.dial(testContext(t), d.addr, conf)
			if err == nil {
				c.Close()
				t.Fatal("dial with a wrong pin succeeded")
			}
			var certErr *transport.CertificateError
			if !errors.As(err, &certErr) || !errors.Is(err, transport.ErrCertificatePinMismatch) {
				t.Fatalf("wrong pin: %v (%T), want *CertificateError wrapping ErrCertificatePinMismatch", err, err)
			}
		})
	}
	if _, err := certs.ClientTLSConfig(certs.TrustOptions{PinnedSHA256: "abc"}); err == nil {
		t.Fatal("a 3-digit pin was accepted")
	}
}

// Without a CA file, a pin or local trust, a self-signed broker is refused with
// a typed error that says how to trust it.
func TestUntrustedBrokerGuides(t *testing.T) {
	m, _ := testMaterial(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no local trust file
	lc, _ := quietConfig()
	ln := listenTCP(t, lc, m.ServerTLS())
	conf, err := certs.ClientTLSConfig(certs.TrustOptions{})
	if err != nil {
		t.Fatalf("ClientTLSConfig: %v", err)
	}
	_, err = transport.DialTCP(testContext(t), ln.Addr().String(), conf)
	var certErr *transport.CertificateError
	if !errors.As(err, &certErr) {
		t.Fatalf("dial: %v (%T), want *CertificateError", err, err)
	}
	for _, want := range []string{"fingerprint", "fibrilctl cert fingerprint", "CA file"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not mention %q", err, want)
		}
	}
}

func TestWithDefaultPort(t *testing.T) {
	cases := map[string]string{
		"":               ":9876",
		"localhost":      "localhost:9876",
		"127.0.0.1":      "127.0.0.1:9876",
		"::1":            "[::1]:9876",
		"[::1]":          "[::1]:9876",
		"broker:1234":    "broker:1234",
		"[::1]:1234":     "[::1]:1234",
		"broker.example": "broker.example:9876",
	}
	for in, want := range cases {
		if got := transport.WithDefaultPort(in); got != want {
			t.Errorf("WithDefaultPort(%q) = %q, want %q", in, got, want)
		}
	}
}

// Close does not wait for a connection still in its sniff.
func TestListenerCloseAbortsSniff(t *testing.T) {
	lc, _ := quietConfig()
	ln, err := lc.ListenTCP("127.0.0.1:0", nil)
	if err != nil {
		t.Fatalf("ListenTCP: %v", err)
	}
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer silent.Close()
	// Make sure the listener has taken the connection into its sniff.
	probe, err := transport.DialTCP(testContext(t), ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	roundTrip(t, ln, probe)

	start := time.Now()
	_ = ln.Close()
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Fatalf("Close took %v: it waited for the silent client's sniff", elapsed)
	}
	_ = silent.SetReadDeadline(time.Now().Add(testTimeout))
	if n, err := silent.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("silent client after Close: %d bytes, %v", n, err)
	}
}
