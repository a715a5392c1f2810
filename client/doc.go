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
// When the connection is lost, in-flight operations fail (nothing is replayed).
// Unless DisableAutoReconnect is set, the next operation makes one attempt to
// connect again, and so does the client at once while subscriptions are open. A
// reconnect resumes the session (PROTOCOL §7.7): HELLO presents the last
// HELLO_OK's identity, AUTH repeats the credentials, and RECONCILE_CLIENT lists
// the open subscriptions (§7.8). Kept subscriptions go on delivering into the
// same channel; the others close with a *SubscriptionClosedError carrying the
// reconcile code (40 when the broker did not mention them). When the broker
// resumed the session, deliveries the application holds settle normally;
// otherwise settling them returns ErrStaleDelivery and the message redelivers.
// With DisableAutoReconnect, subscriptions close with the connection error and
// Reconnect (which returns the outcome) is the application's to call.
//
// # Publishing and routing
//
// A Publisher picks the partition: FNV-1a-64 of the partition key modulo the
// partition count, round-robin without a key. Partition counts come from
// TOPOLOGY (fetched at Dial and on the first publish to a topic, refreshed after
// 30 s) and from DeclareQueue. Confirmed publishes follow a REDIRECT up to
// MaxRedirects times on the current connection.
//
// # Exclusive consumer groups
//
// SubscribeTopicExclusive (or SubscribeTopic with SubscribeOptions.ConsumerGroup)
// joins the queue's cohort: every partition is subscribed with consumer_group
// (and ConsumerTarget, a soft maximum), and the broker delivers each partition
// to one member at a time (PROTOCOL §7.6, SPEC §4). The client's first
// exclusive SUBSCRIBE goes alone and without member_id; the id the broker
// mints (Subscription.MemberID) is cached for the client's life and sent on
// every later exclusive SUBSCRIBE, in the RECONCILE_CLIENT entries of
// exclusive subscriptions (with their cohort id and target) and over every
// later connection, so the cohort keeps seeing one member across reconnects.
// ASSIGNMENT_CHANGED pushes update Subscription.Assignment and reach
// ClientOptions.OnAssignmentChanged on a goroutine of their own, per cohort in
// growing generation order, stale ones dropped; notices that arrive while the
// callback runs are merged, so a slow callback skips generations and holds up
// nothing else. SUBSCRIBE_ERR 409 and 400 to an exclusive subscribe are a
// *CohortError (ErrCohortConflict, ErrCohortInvalid).
//
// # Errors
//
// Broker errors are *BrokerError; IsRetryable says whether trying again can help.
// Client-side guides (connection refused, heartbeat timeout, failed to
// deserialize) carry the wording of fibril-wire/error_guides.json.
package client
