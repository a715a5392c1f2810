package peers

// The peer systems by name: which client, which server process, which URL,
// and the loopback rule every URL must pass.
//
// Invariants:
//   - Every name here is a system= value of ../shared/bench-peers, with the
//     same server key (the name=PID key of -pids) and the same default URL.
//   - New never returns a Target for a URL that is not one loopback address
//     with the system's scheme: the benchmark must not send load elsewhere.

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/fibril-go/fibril/bench"
)

// Spec describes one peer system.
type Spec struct {
	Name       string // system= value
	Server     string // key of the server process in -pids
	Scheme     string // URL scheme its client dials
	DefaultURL string // the harness's default for this system
	// Fanout tells whether the system has append-only logs with independent
	// durable readers (its Target is a bench.FanoutTarget).
	Fanout bool
	// Queues tells whether the system runs the queue scenarios
	// (confirmed-publish and end-to-end).
	Queues bool
	// new builds the Target; url has passed CheckURL.
	new func(spec Spec, url string) bench.Target
}

// Server keys, as in the harness's -pids.
const (
	ServerNATS     = "nats"
	ServerNATSSync = "nats-sync"
	ServerRabbitMQ = "rabbitmq"
	ServerRedis    = "redis"
)

// Specs lists the peers in the harness's column order (bench.KnownPeers).
var Specs = []Spec{
	{Name: bench.PeerNATS, Server: ServerNATS, Scheme: "nats", DefaultURL: "nats://127.0.0.1:4222",
		Fanout: true, Queues: true, new: newNATSTarget},
	{Name: bench.PeerNATSSync, Server: ServerNATSSync, Scheme: "nats", DefaultURL: "nats://127.0.0.1:4223",
		Fanout: true, Queues: true, new: newNATSTarget},
	{Name: bench.PeerRabbitQuorum, Server: ServerRabbitMQ, Scheme: "amqp", DefaultURL: "amqp://guest:guest@127.0.0.1:5672/",
		Queues: true, new: newRabbitTarget},
	{Name: bench.PeerRabbitClassic, Server: ServerRabbitMQ, Scheme: "amqp", DefaultURL: "amqp://guest:guest@127.0.0.1:5672/",
		Queues: true, new: newRabbitTarget},
	// The stream queue takes confirmed-publish as well (as in the harness);
	// end-to-end needs competing consumers, which a stream does not have.
	{Name: bench.PeerRabbitStream, Server: ServerRabbitMQ, Scheme: "amqp", DefaultURL: "amqp://guest:guest@127.0.0.1:5672/",
		Fanout: true, new: newRabbitTarget},
	{Name: bench.PeerRedisStreams, Server: ServerRedis, Scheme: "redis", DefaultURL: "redis://127.0.0.1:6379/0",
		Fanout: true, Queues: true, new: newRedisTarget},
}

// Lookup returns the spec of system name.
func Lookup(name string) (Spec, bool) {
	i := slices.IndexFunc(Specs, func(s Spec) bool { return s.Name == name })
	if i < 0 {
		return Spec{}, false
	}
	return Specs[i], true
}

// Names is every peer name, comma-separated, for help texts.
func Names() string {
	names := make([]string, len(Specs))
	for i, s := range Specs {
		names[i] = s.Name
	}
	return strings.Join(names, ",")
}

// RequireLoopback refuses a broker URL whose host is not this machine's
// loopback interface ("localhost", 127.0.0.0/8 or ::1), as the harness does.
// A list of servers (NATS accepts "nats://a,nats://b") is refused too: one
// URL, one server.
func RequireLoopback(raw string) error {
	if strings.Contains(raw, ",") {
		return fmt.Errorf("refusing broker address %q: one URL, not a list", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("broker address %q: %w", raw, err)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("refusing non-loopback broker address %q (use 127.0.0.1)", raw)
	}
	return nil
}

// CheckURL checks raw for spec: its scheme, a port, and the loopback rule.
func (s Spec) CheckURL(raw string) error {
	if err := RequireLoopback(raw); err != nil {
		return err
	}
	u, _ := url.Parse(raw) // RequireLoopback parsed it
	if u.Scheme != s.Scheme {
		return fmt.Errorf("%s wants a %s:// URL, not %q", s.Name, s.Scheme, raw)
	}
	if u.Port() == "" {
		return fmt.Errorf("%s URL %q names no port", s.Name, raw)
	}
	return nil
}

// New returns the Target of system name on the server at rawURL ("" = the
// default URL).
func New(name, rawURL string) (bench.Target, error) {
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
	return spec.new(spec, rawURL), nil
}
