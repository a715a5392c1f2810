// Package wire is the byte-exact codec of the Fibril client wire protocol, version 1,
// as specified in PROTOCOL.md (§1.2 framing, §2 primitives, §4 opcodes, §5 bodies,
// §6 error codes) and pinned by the shared golden vectors in
// fibril-wire/wire_vectors.json. A broker or client built on it can talk to Fibril's
// own clients and brokers unchanged.
//
// The package is pure: no goroutines, no clocks, no sockets. Its only I/O is
// ReadFrame over a *bufio.Reader; writers append frames to a buffer they own.
//
// # Shape
//
//   - A frame is a 20-byte Header then a payload. ReadFrame / DecodeHeader read it;
//     AppendFrame and AppendBodyFrame write it.
//   - Each client body is a struct named after its opcode (Publish, Deliver, ...) with
//     AppendTo (encode, magic included) and Decode<Name> (strict decode). DecodeBody
//     dispatches by opcode; ErrorBody serves ERROR, HELLO_ERR, AUTH_ERR, SUBSCRIBE_ERR.
//   - opt<T> is Optional[T]; headers keep wire order (Headers, a slice) so that a
//     decoded body re-encodes byte for byte.
//
// # Decoding is strict, as in Fibril
//
// Truncation, a wrong magic, trailing bytes, invalid UTF-8, a bool or opt tag other
// than 0 or 1, and an unknown content_type (or other closed enum) kind all fail with a
// *DecodeError naming the field; errors.Is(err, ErrMalformed) is true for all of them,
// and the broker answers ERROR 400 "malformed frame: <err>". Three trailing optionals
// may be wholly absent (PUBLISH ttl_ms, DECLARE_QUEUE default_message_ttl_ms,
// RECONCILE_RESULT's reason-code tail); encoders always write them.
//
// Decoding never trusts a count: a list is allocated only after checking that its
// elements could fit in the bytes that remain.
//
// # Glossary
//
//   - magic: the 4 ASCII bytes that open every non-empty body ("FPB1" for PUBLISH).
//   - queue_key: (topic, partition, group), in that order in SUBSCRIBE, SUBSCRIBE_OK,
//     REDIRECT, reconcile and topology entries; PUBLISH, DELIVER, ACK and NACK use
//     topic, group, partition instead.
//   - delivery tag: the u64 that settles one delivery attempt (the offset for streams).
//   - partitioning version: the topology version a client routed under; lower than the
//     broker's means REDIRECT.
//   - reason code: the open u16 namespace of typed close reasons (§7.9).
package wire
