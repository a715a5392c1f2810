package client

// Pattern subscribe over streams (SPEC §3 "Pattern subscribe", client-only): a
// '*'-glob over the stream names the client knows, with later-matching streams
// attached by polling.
//
// Invariants:
//   - The candidates are the client's stream catalogue (stream.go), refreshed by
//     FetchTopology on every poll. A standalone broker lists no streams in
//     TOPOLOGY (generation 0, empty), so there a pattern matches only streams
//     this client declared (DeclarePlexus) or subscribed by name: a stream
//     another client declares is not seen. That is a limit of the protocol, not
//     of this code: the wire has no "list streams" request a standalone broker
//     answers.
//   - A stream is attached at most once per subscription (topics, under mu); a
//     failed attach that registered nothing is forgotten and retried on the next
//     poll.
//   - The poller stops when the subscription closes.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// SubscribeStreamPattern subscribes to every known stream whose name matches
// glob ('*' matches any run of characters, "*" matches all) and attaches
// streams that match later, polling every opts.PatternPollInterval. Each
// delivery's Topic names its stream. See the package notes above on what a
// standalone broker lets the client know.
func (c *Client) SubscribeStreamPattern(ctx context.Context, glob string, opts StreamOptions) (*StreamSubscription, error) {
	if err := validatePattern(glob); err != nil {
		return nil, err
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	eng, err := c.engine(ctx)
	if err != nil {
		return nil, err
	}
	sub := newStreamSubscription(c, glob, true, opts)
	sub.attach(eng)
	if _, err := c.FetchTopology(ctx); err != nil && eng.isClosed() {
		sub.closeWith(err)
		return nil, err
	}
	if err := sub.attachMatching(ctx); err != nil {
		sub.closeWith(err)
		return nil, err
	}
	interval := opts.PatternPollInterval
	if interval == 0 {
		interval = patternPollIntervalDefault
	}
	go sub.pollPattern(interval)
	return sub, nil
}

// attachMatching attaches every catalogue stream that matches and is not yet
// attached. A stream that vanished (404) is skipped; other broker errors fail.
func (s *StreamSubscription) attachMatching(ctx context.Context) error {
	for _, topic := range s.client.streams.names() {
		if !globMatch(s.name, topic) {
			continue
		}
		s.mu.Lock()
		seen, e, detached := s.topics[topic], s.eng, s.detached
		s.mu.Unlock()
		if seen || detached {
			continue
		}
		if e.isClosed() {
			return nil // a reconnect is under way; the next poll retries
		}
		err := s.attachTopic(ctx, e, topic)
		if err == nil {
			continue
		}
		if !s.forgetUnregistered(topic) {
			return err // partly subscribed: the subscription is inconsistent
		}
		if e.isClosed() || IsRetryable(err) || isNotFound(err) {
			s.client.opts.Logger.Debug("client: pattern attach deferred", "stream", topic, "err", err)
			continue
		}
		return err
	}
	return nil
}

func isNotFound(err error) bool {
	var notFound *StreamNotFoundError
	return errors.As(err, &notFound)
}

// forgetUnregistered drops topic's partitions when none registered, so a
// later poll may attach it afresh; false when some did register.
func (s *StreamSubscription) forgetUnregistered(topic string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, part := range s.parts {
		if part.topic == topic && part.registered {
			return false
		}
	}
	kept := make([]*streamPartition, 0, len(s.parts))
	for _, part := range s.parts {
		if part.topic != topic {
			kept = append(kept, part)
		}
	}
	s.parts = kept
	delete(s.topics, topic)
	return true
}

// pollPattern refreshes the catalogue and attaches new matches until the
// subscription closes.
func (s *StreamSubscription) pollPattern(interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-ticker.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(interval, s.client.opts.HandshakeTimeout))
		if _, err := s.client.FetchTopology(ctx); err != nil {
			s.client.opts.Logger.Debug("client: pattern poll: topology", "err", err)
		}
		if err := s.attachMatching(ctx); err != nil {
			s.closeWith(err)
		}
		cancel()
	}
}

// validatePattern: a glob is a stream name in which '*' may stand anywhere.
func validatePattern(glob string) error {
	if glob == "" {
		return fmt.Errorf("%w: empty pattern", ErrInvalidName)
	}
	for _, r := range glob {
		if r == '*' || r == '.' || r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			continue
		}
		return fmt.Errorf("%w: pattern %q may hold only [a-z0-9._-] and '*'", ErrInvalidName, glob)
	}
	return nil
}

// globMatch reports whether name matches glob, where '*' matches any run of
// characters (also empty) and every other character matches itself.
func globMatch(glob, name string) bool {
	literals := strings.Split(glob, "*")
	if len(literals) == 1 {
		return glob == name
	}
	if !strings.HasPrefix(name, literals[0]) {
		return false
	}
	rest := name[len(literals[0]):]
	last := literals[len(literals)-1]
	for _, lit := range literals[1 : len(literals)-1] {
		i := strings.Index(rest, lit)
		if i < 0 {
			return false
		}
		rest = rest[i+len(lit):]
	}
	return len(rest) >= len(last) && strings.HasSuffix(rest, last)
}
