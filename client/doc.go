// Package client is Fibril's Go client, shaped like the API users of Fibril's
// original Go client know (SPEC §15).
//
//	c, err := client.Dial(ctx, "localhost:9876", client.ClientOptions{})
//	pub := c.Publisher("orders")
//	offset, err := pub.PublishConfirmed(ctx, client.JSON(order).PartitionKey(order.ID))
//	sub, err := c.SubscribeTopic(ctx, "orders", client.SubscribeOptions{Prefetch: 16})
//	for d := range sub.Deliveries() { handle(d); d.Complete(ctx) }
//
// # Connection
//
// Dial connects over QUIC by default (Transport "tcp" for TCP, plaintext unless
// TLS is set), runs the handshake of PROTOCOL §3 (HELLO with request id 1, AUTH
// with id 2 when Credentials are set, the compliance marker checked exactly), and
// starts three goroutines: a reader that dispatches replies by request id and
// pushes by opcode, a writer that batches frames through a bufio.Writer flushed
// when its queue drains, and a heartbeat that PINGs every HeartbeatInterval and
// declares the broker dead after 3 intervals without any frame. Requests are
// numbered from 4.
//
// On a loopback address with no TLS options, the client trusts the CA that a
// broker on the same machine published for that port (see transport/doc.go);
// a remote broker needs a CA file or a fingerprint pin, or a publicly issued
// certificate.
//
// When the connection is lost, in-flight operations fail (nothing is replayed)
// and subscriptions close with the cause. Unless DisableAutoReconnect is set, the
// next operation makes one attempt to connect again. A reconnect starts a fresh
// session: this client does not yet resume sessions or reconcile subscriptions
// (PROTOCOL §7.7, §7.8), so subscribe again after a reconnect.
//
// # Publishing and routing
//
// A Publisher picks the partition: FNV-1a-64 of the partition key modulo the
// partition count, round-robin without a key. Partition counts come from
// TOPOLOGY (fetched at Dial and on the first publish to a topic, refreshed after
// 30 s) and from DeclareQueue. Confirmed publishes follow a REDIRECT up to
// MaxRedirects times on the current connection.
//
// # Errors
//
// Broker errors are *BrokerError; IsRetryable says whether trying again can help.
// Client-side guides (connection refused, heartbeat timeout, failed to
// deserialize) carry the wording of fibril-wire/error_guides.json.
package client
