package core

// Queue settings and dead-letter policy (SPEC §2). Invariants:
//   - settings change only through a Declare entry, so a replayed partition
//     holds the settings the live one held at the same index;
//   - a custom target is a valid name and never the queue itself.

// DLQPolicyKind is the wire dlq_policy kind (PROTOCOL.md §5.12). Append-only.
type DLQPolicyKind uint8

const (
	DLQDiscard DLQPolicyKind = 0
	DLQGlobal  DLQPolicyKind = 1
	DLQCustom  DLQPolicyKind = 2
)

// DLQTarget names the queue dead-lettered copies go to.
type DLQTarget struct {
	Topic string
	Group string
}

// DLQPolicy is what happens to a message that failed or ran out of retries.
type DLQPolicy struct {
	Kind   DLQPolicyKind
	Target DLQTarget // custom only
}

// QueueSettings are a queue's declared settings.
type QueueSettings struct {
	DLQ          DLQPolicy
	MaxRetries   uint32
	DefaultTTLMs int64 // 0 = messages without a TTL never expire
}

// DLQReason says why a message left its queue (PROTOCOL.md §7.4). Append-only.
type DLQReason uint8

const (
	ReasonNone             DLQReason = 0
	ReasonRetriesExhausted DLQReason = 1
	ReasonTerminalNack     DLQReason = 2
	ReasonPendingRecovery  DLQReason = 3
	ReasonExpired          DLQReason = 4
)

func (r DLQReason) String() string {
	switch r {
	case ReasonRetriesExhausted:
		return "retries_exhausted"
	case ReasonTerminalNack:
		return "terminal_nack"
	case ReasonPendingRecovery:
		return "pending_recovery"
	case ReasonExpired:
		return "expired"
	}
	return "none"
}

// resolveSettings merges a declare's present fields over the current settings
// ("absent means the existing setting", PROTOCOL.md §5.12).
func resolveSettings(cfg *Config, current QueueSettings, in *Declare) (QueueSettings, *Error) {
	next := current
	if in.DLQ != nil {
		switch in.DLQ.Kind {
		case DLQDiscard, DLQGlobal:
			next.DLQ = DLQPolicy{Kind: in.DLQ.Kind}
		case DLQCustom:
			target := DLQTarget{Topic: in.DLQ.Target.Topic, Group: NormalizeGroup(in.DLQ.Target.Group)}
			if err := validateTarget(cfg, target); err != nil {
				return current, err
			}
			next.DLQ = DLQPolicy{Kind: DLQCustom, Target: target}
		default:
			return current, ErrInvalidSettings
		}
	}
	if in.MaxRetries != nil {
		next.MaxRetries = *in.MaxRetries
	}
	if in.DefaultTTLMs != nil {
		if *in.DefaultTTLMs < 0 {
			return current, ErrInvalidSettings
		}
		next.DefaultTTLMs = *in.DefaultTTLMs
	}
	return next, nil
}

// validateTarget checks a dead-letter target's names and refuses the queue
// itself, which would loop forever.
func validateTarget(cfg *Config, target DLQTarget) *Error {
	if ValidateName(target.Topic) != nil {
		return ErrInvalidName
	}
	if target.Group != "" && ValidateName(target.Group) != nil {
		return ErrInvalidName
	}
	if target.Topic == cfg.Queue.Topic && target.Group == cfg.Queue.Group {
		return ErrDeadLetterLoop
	}
	return nil
}
