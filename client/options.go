package client

// Client options, their defaults, and the client's named limits.
//
// Invariants:
//   - resolved() fills every zero field with its default and never mutates the
//     caller's value; the rest of the package reads only resolved options.
//   - Every buffer the client keeps is bounded by a constant below.

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/fibril-go/fibril/transport/certs"
)

// Version is this client's version, sent in HELLO.
const Version = "0.1.0"

// Transports accepted in ClientOptions.Transport.
const (
	TransportQUIC = "quic"
	TransportTCP  = "tcp"
)

const (
	// HeartbeatIntervalDefault matches Fibril on both sides (PROTOCOL §1.5).
	HeartbeatIntervalDefault = 5 * time.Second
	// heartbeatMissedMax: the peer is dead when nothing arrived for this many
	// intervals (the 3 x rule of PROTOCOL §1.5).
	heartbeatMissedMax = 3
	// MaxRedirectsDefault is the Go client's redirect budget (PROTOCOL §5.22).
	MaxRedirectsDefault = 3
	// HandshakeTimeoutDefault bounds dial + TLS + HELLO/AUTH when the caller's
	// context has no deadline.
	HandshakeTimeoutDefault = 10 * time.Second
	// ClientNameDefault is sent in HELLO when ClientOptions.ClientName is empty.
	ClientNameDefault = "fibril-go"

	// writeQueueFramesMax bounds frames waiting for the writer goroutine; a full
	// queue blocks senders (backpressure) until the socket drains.
	writeQueueFramesMax = 1024
	// writeBufferBytes is the bufio.Writer size: frames are batched into writes of
	// up to this size and flushed when the queue drains (PERFORMANCE-NOTES).
	writeBufferBytes = 64 << 10
	// readBufferBytes is the bufio.Reader size of the reader goroutine.
	readBufferBytes = 64 << 10
	// requestsPendingMax bounds requests awaiting a reply (confirms in flight
	// included); beyond it new requests wait for a slot.
	requestsPendingMax = 65536
	// deliveryBufferMax caps one subscription's channel; the broker's prefetch
	// normally keeps deliveries well below it.
	deliveryBufferMax = 8192
	// pooledFrameBytesMax: encoded frames up to this size return to the pool.
	pooledFrameBytesMax = 64 << 10
	// closeFlushTimeout bounds how long Close waits for queued frames (ACKs) to be
	// written before closing the connection.
	closeFlushTimeout = 2 * time.Second
	// routeCacheTTL: a topic's partition count is refetched after this long, so a
	// queue declared with more partitions elsewhere is picked up.
	routeCacheTTL = 30 * time.Second
)

// Credentials are sent in AUTH right after HELLO_OK. Do not set them against a
// broker without auth: it answers AUTH_ERR 400 and the connect fails (§3.3).
type Credentials struct {
	Username string
	Password string
}

// TLSOptions configure TLS. With Transport "tcp", a nil *TLSOptions means
// plaintext. QUIC always uses TLS; nil then means the default trust.
//
// Trust precedence (see transport/doc.go): PinnedSHA256 > CAFile > the local
// trust file a broker on this machine publishes (loopback addresses only) > the
// OS roots.
type TLSOptions struct {
	// CAFile is a PEM file of CAs to trust, typically the broker's
	// <data_dir>/tls/ca.pem.
	CAFile string
	// PinnedSHA256 is the hex SHA-256 fingerprint of the broker's leaf or CA
	// certificate (printed by the broker; `fibrilctl cert fingerprint`).
	PinnedSHA256 string
	// ServerName overrides the name for SNI and hostname verification.
	ServerName string
	// ClientCert is presented for mTLS.
	ClientCert *tls.Certificate
	// Config, when set, is used as is (cloned) and the fields above are ignored.
	Config *tls.Config
}

// clientConfig builds the TLS configuration for a dial to addr.
func (o *TLSOptions) clientConfig(addr string) (*tls.Config, error) {
	if o != nil && o.Config != nil {
		return o.Config.Clone(), nil
	}
	var trust certs.TrustOptions
	if o != nil {
		trust = certs.TrustOptions{
			CAFile:       o.CAFile,
			PinnedSHA256: o.PinnedSHA256,
			ServerName:   o.ServerName,
			ClientCert:   o.ClientCert,
		}
	}
	return certs.ClientTLSConfigFor(addr, trust)
}

// ClientOptions configure Dial. The zero value connects over QUIC with default
// trust, no credentials, a 5 s heartbeat and auto-reconnect.
type ClientOptions struct {
	// Transport is "quic" (the default) or "tcp".
	Transport string
	// Credentials, when set, are sent in AUTH during the handshake.
	Credentials *Credentials
	// TLS: see TLSOptions. Nil with Transport "tcp" means plaintext.
	TLS *TLSOptions
	// HeartbeatInterval between PINGs; the broker is considered dead after 3
	// intervals without any frame. Zero means 5 s.
	HeartbeatInterval time.Duration
	// DisableAutoReconnect stops the client from redialing once before the next
	// operation after the connection is lost. Subscriptions then end with the
	// connection error; an explicit Reconnect still resumes the session, so
	// deliveries the application holds settle if the broker resumed it.
	DisableAutoReconnect bool
	// ReconcileRestore asks the broker, on a reconnect whose session it no longer
	// has, to subscribe the remembered subscriptions anew (policy restore) instead
	// of telling the client to close them (conservative, the default; §7.8).
	ReconcileRestore bool
	// MaxRedirects a confirmed publish follows. Zero means 3; negative means none.
	MaxRedirects int
	// ClientName is sent in HELLO (informational). Empty means "fibril-go".
	ClientName string
	// HandshakeTimeout bounds connecting when the context has no deadline. Zero
	// means 10 s.
	HandshakeTimeout time.Duration
	// Logger receives connection events. Nil means slog.Default().
	Logger *slog.Logger
	// OnAssignmentChanged, when set, receives the ASSIGNMENT_CHANGED notices
	// of the cohorts this client joined (SubscribeTopicExclusive), per cohort
	// in growing generation order; a notice at or below the last generation
	// seen for its (topic, group, consumer group) is dropped. It runs on a
	// goroutine of its own, one call at a time, never on the connection's
	// reader, so a slow callback delays no delivery. While it runs, newer
	// notices of a cohort are merged into one (the latest assignment, with
	// Added and Revoked spanning the merged notices), so a slow callback
	// skips generations but never sees a stale assignment and the client
	// queues at most one notice per cohort. Notices still pending when the
	// client closes are dropped. Subscription.Assignment reflects every
	// accepted notice at once, whatever the callback is doing.
	OnAssignmentChanged func(AssignmentChange)
}

func (o ClientOptions) resolved() (ClientOptions, error) {
	switch o.Transport {
	case "":
		o.Transport = TransportQUIC
	case TransportQUIC, TransportTCP:
	default:
		return o, fmt.Errorf("client: unknown transport %q (want %q or %q)", o.Transport, TransportQUIC, TransportTCP)
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = HeartbeatIntervalDefault
	}
	switch {
	case o.MaxRedirects == 0:
		o.MaxRedirects = MaxRedirectsDefault
	case o.MaxRedirects < 0:
		o.MaxRedirects = 0
	}
	if o.ClientName == "" {
		o.ClientName = ClientNameDefault
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = HandshakeTimeoutDefault
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}
