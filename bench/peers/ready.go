package peers

// Waiting for a peer server to accept work, for the comparison script (the
// harness's `peers wait`).

import (
	"context"
	"fmt"
	"time"
)

// readyRetryPause is the pause between two attempts of WaitReady.
const readyRetryPause = 500 * time.Millisecond

// readyAttemptTimeout bounds one attempt.
const readyAttemptTimeout = 2 * time.Second

// Ready asks the server of system name at rawURL once whether it works and
// returns key=value facts about it: version (all), and for Redis its
// appendonly, appendfsync and save settings, which the script checks.
func Ready(ctx context.Context, name, rawURL string) ([][2]string, error) {
	spec, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("unknown peer system %q (known: %s)", name, Names())
	}
	if rawURL == "" {
		rawURL = spec.DefaultURL
	}
	if err := spec.CheckURL(rawURL); err != nil {
		return nil, err
	}
	switch spec.Server {
	case ServerNATS, ServerNATSSync:
		return natsReady(ctx, rawURL)
	case ServerRabbitMQ:
		return rabbitReady(ctx, rawURL)
	case ServerRedis:
		return redisReady(ctx, rawURL)
	}
	return nil, fmt.Errorf("no readiness check for %s", name)
}

// WaitReady repeats Ready until it succeeds or ctx ends; a URL the loopback
// rule refuses fails at once.
func WaitReady(ctx context.Context, name, rawURL string) ([][2]string, error) {
	var last error // the last failure that was not the end of ctx
	for {
		attempt, cancel := context.WithTimeout(ctx, readyAttemptTimeout)
		facts, err := Ready(attempt, name, rawURL)
		cancel()
		if err == nil {
			return facts, nil
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		if spec, ok := Lookup(name); !ok {
			return nil, err
		} else if rawURL != "" && spec.CheckURL(rawURL) != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s not ready: %w", name, last)
		case <-time.After(readyRetryPause):
		}
	}
}
