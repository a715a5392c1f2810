package ctl

// queue declare | publish | consume over the wire protocol (the Go client,
// TCP by default, QUIC with --quic); queue delete | purge go to the admin API
// (admin_queues.go).
//
// Invariants:
//   - publish returns only after the broker confirmed the message durable,
//     and prints the partition and offset it got.
//   - consume completes (acks) only the messages it prints and that match
//     --expect; a message that does not match is left unsettled (the broker
//     redelivers it after its lease), and the command exits 1.
//   - consume waits at most --timeout-ms for all --count messages, and exits
//     1 when fewer arrived: a script never hangs on an empty queue.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/fibril-go/fibril/client"
)

// consumeCountMax bounds --count.
const consumeCountMax = 100_000

// dialBroker connects to --broker with the global options.
func (r *run) dialBroker() (*client.Client, error) {
	opts := client.ClientOptions{
		Transport:            client.TransportTCP,
		Credentials:          &client.Credentials{Username: r.g.username.value, Password: r.g.password.value},
		DisableAutoReconnect: true,
		ClientName:           "fibrilctl",
		HandshakeTimeout:     r.g.timeout,
	}
	if r.g.quic.value {
		opts.Transport = client.TransportQUIC
	}
	if r.g.quic.value || r.g.tls.value || r.g.caFile.value != "" || r.g.pin.value != "" {
		opts.TLS = &client.TLSOptions{CAFile: r.g.caFile.value, PinnedSHA256: r.g.pin.value, ServerName: r.g.serverName.value}
	}
	c, err := client.Dial(r.ctx, r.g.broker.value, opts)
	if err != nil {
		return nil, wireError("connect to "+r.g.broker.value, err)
	}
	return c, nil
}

// wireError maps a client error to an exit code.
func wireError(what string, err error) error {
	var be *client.BrokerError
	if errors.As(err, &be) {
		code := exitFailed
		switch be.Code {
		case client.CodeUnauthorized:
			return fail(exitAuth, "%s: %v (check --username/--password, or $%s/$%s)", what, err, envUsername, envPassword)
		case client.CodeNotFound:
			code = exitNotFound
		case client.CodeConflict:
			code = exitConflict
		case client.CodeInvalid:
			code = exitUsage
		case client.CodeTLSRequired:
			return fail(exitUsage, "%s: the broker requires TLS: pass --tls (and --ca-file or --pin-sha256 for a self-signed broker)", what)
		}
		return fail(code, "%s: %v", what, err)
	}
	var certErr *client.CertificateError
	switch {
	case errors.Is(err, client.ErrInvalidName), errors.Is(err, client.ErrInvalidArgument),
		errors.Is(err, client.ErrReservedHeader), errors.Is(err, client.ErrMessageTooLarge):
		return fail(exitUsage, "%s: %v", what, err)
	case errors.As(err, &certErr):
		return fail(exitUnreachable, "%s: %v (pass --ca-file or --pin-sha256)", what, err)
	case errors.Is(err, client.ErrTLSNotSupportedByBroker):
		return fail(exitUsage, "%s: %v (drop --tls)", what, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fail(exitUnreachable, "%s: no answer within --timeout: %v", what, err)
	case errors.Is(err, client.ErrConnectionRefused), errors.Is(err, client.ErrConnectionLost),
		errors.Is(err, client.ErrHeartbeatTimeout), client.IsRetryable(err):
		return fail(exitUnreachable, "%s: %v", what, err)
	}
	return fail(exitFailed, "%s: %v", what, err)
}

func queueCmd() *command {
	return &command{
		name: "queue", summary: "declare, publish to, consume from, delete and purge queues",
		subs: []*command{queueDeclareCmd(), queuePublishCmd(), queueConsumeCmd(), queueDeleteCmd(), queuePurgeCmd()},
	}
}

func queueDeclareCmd() *command {
	var group, dlq, dlqTopic, dlqGroup string
	var partitions, maxRetries uint
	var ttlMs uint64
	return &command{
		name: "declare", summary: "create a queue or change its settings (over the wire protocol)",
		args: "<topic>", minArgs: 1, maxArgs: 1,
		long: "Only the flags given are sent; the others keep the queue's current (or default) value.\nAn existing queue keeps its partition count.",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&group, "group", "", "queue group (namespace); empty is the default")
			fs.UintVar(&partitions, "partitions", 1, "number of partitions")
			fs.UintVar(&maxRetries, "max-retries", 5, "retries before a message is dead-lettered")
			fs.StringVar(&dlq, "dlq", "discard", "dead-letter policy: discard, global or custom (with --dlq-topic)")
			fs.StringVar(&dlqTopic, "dlq-topic", "", "the DLQ topic of policy custom")
			fs.StringVar(&dlqGroup, "dlq-group", "", "the DLQ group of policy custom")
			fs.Uint64Var(&ttlMs, "ttl-ms", 0, "default TTL in ms of messages published without one")
		},
		action: func(r *run) error {
			topic := r.args[0]
			cfg := client.NewQueueConfig(topic).Group(group)
			if r.isSet("partitions") {
				if partitions == 0 || partitions > 1<<16 {
					return &usageError{cmd: r.cmd, msg: "--partitions must be 1..65536"}
				}
				cfg.PartitionCount(uint32(partitions))
			}
			if r.isSet("max-retries") {
				if maxRetries > math.MaxUint32 {
					return &usageError{cmd: r.cmd, msg: "--max-retries is over 4294967295"}
				}
				cfg.DlqMaxRetries(uint32(maxRetries))
			}
			if (dlqTopic != "" || dlqGroup != "") && dlq != "custom" {
				if r.isSet("dlq") {
					return &usageError{cmd: r.cmd, msg: "--dlq-topic and --dlq-group go with --dlq custom"}
				}
				dlq = "custom"
			}
			if r.isSet("dlq") || dlq == "custom" {
				switch dlq {
				case "discard":
					cfg.Dlq(client.DlqDiscard())
				case "global":
					cfg.Dlq(client.DlqGlobal())
				case "custom":
					if dlqTopic == "" {
						return &usageError{cmd: r.cmd, msg: "--dlq custom needs --dlq-topic"}
					}
					cfg.Dlq(client.DlqCustom(dlqTopic, dlqGroup))
				default:
					return &usageError{cmd: r.cmd, msg: fmt.Sprintf("--dlq %q: want discard, global or custom", dlq)}
				}
			}
			if r.isSet("ttl-ms") {
				if ttlMs == 0 {
					return &usageError{cmd: r.cmd, msg: "--ttl-ms must be at least 1"}
				}
				cfg.DefaultMessageTTL(time.Duration(ttlMs) * time.Millisecond)
			}
			c, err := r.dialBroker()
			if err != nil {
				return err
			}
			defer c.Close()
			count, err := c.DeclareQueue(r.ctx, cfg)
			if err != nil {
				return wireError("declare "+queueName(topic, group), err)
			}
			if r.g.json.value {
				r.printValue(map[string]any{"topic": topic, "group": group, "partition_count": count})
				return nil
			}
			r.out("declared %s with %d partition(s)\n", queueName(topic, group), count)
			return nil
		},
	}
}

// headerList collects --header k=v.
type headerList [][2]string

func (h *headerList) String() string { return fmt.Sprint([][2]string(*h)) }
func (h *headerList) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", v)
	}
	*h = append(*h, [2]string{k, val})
	return nil
}

func queuePublishCmd() *command {
	var group, message, partitionKey, contentType string
	var headers headerList
	return &command{
		name: "publish", summary: "publish one message and wait for the broker's durable confirm",
		args: "<topic>", minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&group, "group", "", "queue group (namespace); empty is the default")
			fs.StringVar(&message, "message", "", "the message text (required)")
			fs.StringVar(&partitionKey, "partition-key", "", "route by this key (FNV-1a mod the partition count); round-robin without")
			fs.StringVar(&contentType, "content-type", "text/plain", "the message's MIME type")
			fs.Var(&headers, "header", "a header KEY=VALUE (repeatable)")
		},
		action: func(r *run) error {
			if !r.isSet("message") {
				return &usageError{cmd: r.cmd, msg: "--message is required"}
			}
			topic := r.args[0]
			msg := client.Custom(contentType, []byte(message))
			for _, h := range headers {
				msg.Header(h[0], h[1])
			}
			if partitionKey != "" {
				msg.PartitionKey(partitionKey)
			}
			c, err := r.dialBroker()
			if err != nil {
				return err
			}
			defer c.Close()
			conf, err := c.PublisherGrouped(topic, group).PublishWithConfirmation(r.ctx, msg)
			if err != nil {
				return wireError("publish to "+queueName(topic, group), err)
			}
			offset, err := conf.Wait(r.ctx)
			if err != nil {
				return wireError("publish to "+queueName(topic, group), err)
			}
			if r.g.json.value {
				r.printValue(map[string]any{"topic": topic, "group": group, "partition": conf.Partition(), "offset": offset})
				return nil
			}
			r.out("published to %s partition %d offset %d\n", queueName(topic, group), conf.Partition(), offset)
			return nil
		},
	}
}

type consumedMessage struct {
	Topic     string            `json:"topic"`
	Group     string            `json:"group"`
	Partition uint32            `json:"partition"`
	Offset    uint64            `json:"offset"`
	Retries   uint32            `json:"retries"`
	Headers   map[string]string `json:"headers"`
	Text      string            `json:"text"`
}

func queueConsumeCmd() *command {
	var group, expect string
	var count, prefetch uint
	var timeoutMs uint64
	return &command{
		name: "consume", summary: "receive messages, print them and complete (ack) them",
		args: "<topic>", minArgs: 1, maxArgs: 1,
		long: "Exits 1 when fewer than --count messages arrive within --timeout-ms, or when a message\ndoes not equal --expect (that message is not acked: the broker redelivers it).",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&group, "group", "", "queue group (namespace); empty is the default")
			fs.UintVar(&count, "count", 1, "messages to receive")
			fs.UintVar(&prefetch, "prefetch", 1, "unsettled deliveries per partition")
			fs.Uint64Var(&timeoutMs, "timeout-ms", 5000, "give up after this many ms without all --count messages")
			fs.StringVar(&expect, "expect", "", "fail unless every message's text is exactly this")
		},
		action: func(r *run) error {
			if count == 0 || count > consumeCountMax {
				return &usageError{cmd: r.cmd, msg: fmt.Sprintf("--count must be 1..%d", consumeCountMax)}
			}
			if prefetch == 0 || prefetch > 1<<16 {
				return &usageError{cmd: r.cmd, msg: "--prefetch must be 1..65536"}
			}
			if timeoutMs == 0 {
				return &usageError{cmd: r.cmd, msg: "--timeout-ms must be at least 1"}
			}
			topic := r.args[0]
			// The wait for messages has its own budget: --timeout bounds the
			// connect and each settle, --timeout-ms the whole wait.
			wait := time.Duration(timeoutMs) * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), wait+r.g.timeout)
			defer cancel()
			r.ctx = ctx
			c, err := r.dialBroker()
			if err != nil {
				return err
			}
			defer c.Close()
			sub, err := c.SubscribeTopic(ctx, topic, client.SubscribeOptions{Group: group, Prefetch: uint32(prefetch)})
			if err != nil {
				return wireError("subscribe to "+queueName(topic, group), err)
			}
			defer sub.Close()
			timer := time.NewTimer(wait)
			defer timer.Stop()
			var got []consumedMessage
			for uint(len(got)) < count {
				var d *client.Delivery
				var ok bool
				select {
				case d, ok = <-sub.Deliveries():
				case <-timer.C:
					r.printConsumed(got)
					return fail(exitFailed, "got %d of %d messages from %s within %d ms", len(got), count, queueName(topic, group), timeoutMs)
				}
				if !ok {
					r.printConsumed(got)
					return wireError("consume from "+queueName(topic, group), fmt.Errorf("subscription closed: %w", sub.CloseReason()))
				}
				m := consumedMessage{Topic: d.Topic, Group: d.Group, Partition: d.Partition, Offset: d.Offset,
					Retries: d.Retries, Headers: d.Headers, Text: d.Text()}
				got = append(got, m)
				if !r.g.json.value {
					// Human output streams: a long consume shows progress.
					r.out("%s partition %d offset %d: %s\n", queueName(m.Topic, m.Group), m.Partition, m.Offset, m.Text)
				}
				if r.isSet("expect") && m.Text != expect {
					r.printConsumed(got)
					return fail(exitFailed, "message at partition %d offset %d is %q, expected %q (left unacked)", m.Partition, m.Offset, m.Text, expect)
				}
				if err := d.Complete(ctx); err != nil {
					r.printConsumed(got)
					return wireError("complete a message", err)
				}
			}
			r.printConsumed(got)
			return nil
		},
	}
}

// printConsumed prints what consume received, as JSON (the human lines
// were printed as the messages arrived).
func (r *run) printConsumed(got []consumedMessage) {
	if !r.g.json.value {
		return
	}
	if got == nil {
		got = []consumedMessage{}
	}
	r.printValue(map[string]any{"messages": got})
}
