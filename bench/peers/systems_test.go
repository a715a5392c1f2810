package peers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fibril-go/fibril/bench"
)

// The pure parts: the registry, the loopback rule, the per-system
// configuration the harness prescribes, and the left poll. No server needed.

func TestRequireLoopback(t *testing.T) {
	for _, ok := range []string{
		"nats://127.0.0.1:4222", "nats://127.3.4.5:4222", "nats://localhost:4222", "nats://[::1]:4222",
		"amqp://guest:guest@127.0.0.1:5672/", "redis://127.0.0.1:6379/0", "redis://:secret@localhost:6379",
	} {
		if err := RequireLoopback(ok); err != nil {
			t.Errorf("RequireLoopback(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{
		"", "nats://10.0.0.1:4222", "nats://0.0.0.0:4222", "nats://[::]:4222", "nats://example.com:4222",
		"nats://127.0.0.1.example.com:4222", "nats://localhost.example.com:4222",
		"amqp://guest:guest@192.168.1.2:5672/", "redis://8.8.8.8:6379/0",
		"nats://127.0.0.1:4222,nats://10.0.0.1:4222", // a server list: the second is elsewhere
		"127.0.0.1:4222", // no scheme: the "host" is not parsed as one
		"nats://%zz",
	} {
		if err := RequireLoopback(bad); err == nil {
			t.Errorf("RequireLoopback(%q) accepted a non-loopback or unparsable address", bad)
		}
	}
}

func TestCheckURLWantsTheSystemsSchemeAndAPort(t *testing.T) {
	nats, _ := Lookup(bench.PeerNATS)
	redis, _ := Lookup(bench.PeerRedisStreams)
	rabbit, _ := Lookup(bench.PeerRabbitQuorum)
	for _, c := range []struct {
		spec Spec
		url  string
		ok   bool
	}{
		{nats, "nats://127.0.0.1:44222", true},
		{nats, "redis://127.0.0.1:44222", false},
		{nats, "nats://127.0.0.1", false},
		{redis, "redis://127.0.0.1:46379/0", true},
		{redis, "rediss://127.0.0.1:46379/0", false},
		{rabbit, "amqp://guest:guest@127.0.0.1:45672/", true},
		{rabbit, "amqps://guest:guest@127.0.0.1:45672/", false},
		{rabbit, "amqp://guest:guest@10.1.1.1:45672/", false},
	} {
		if err := c.spec.CheckURL(c.url); (err == nil) != c.ok {
			t.Errorf("%s.CheckURL(%q) = %v, want ok=%v", c.spec.Name, c.url, err, c.ok)
		}
	}
}

func TestRegistryMatchesTheHarness(t *testing.T) {
	var names []string
	for _, s := range Specs {
		names = append(names, s.Name)
		if err := s.CheckURL(s.DefaultURL); err != nil {
			t.Errorf("%s: default URL %q: %v", s.Name, s.DefaultURL, err)
		}
	}
	if !slices.Equal(names, bench.KnownPeers) {
		t.Fatalf("peers %v, want the report's column order %v", names, bench.KnownPeers)
	}
	// the -pids keys and default URLs of ../shared/bench-peers
	want := map[string][2]string{
		bench.PeerNATS:          {ServerNATS, "nats://127.0.0.1:4222"},
		bench.PeerNATSSync:      {ServerNATSSync, "nats://127.0.0.1:4223"},
		bench.PeerRabbitQuorum:  {ServerRabbitMQ, "amqp://guest:guest@127.0.0.1:5672/"},
		bench.PeerRabbitClassic: {ServerRabbitMQ, "amqp://guest:guest@127.0.0.1:5672/"},
		bench.PeerRabbitStream:  {ServerRabbitMQ, "amqp://guest:guest@127.0.0.1:5672/"},
		bench.PeerRedisStreams:  {ServerRedis, "redis://127.0.0.1:6379/0"},
	}
	for name, w := range want {
		s, ok := Lookup(name)
		if !ok || s.Server != w[0] || s.DefaultURL != w[1] {
			t.Errorf("%s: server %q url %q, want %q %q", name, s.Server, s.DefaultURL, w[0], w[1])
		}
	}
	if _, ok := Lookup("fibril-tcp"); ok {
		t.Error("Fibril is not a peer")
	}
}

func TestNewGivesEachSystemItsKindOfTarget(t *testing.T) {
	for _, s := range Specs {
		target, err := New(s.Name, "")
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		_, fanout := target.(bench.FanoutTarget)
		if fanout != s.Fanout {
			t.Errorf("%s: FanoutTarget = %v, want %v", s.Name, fanout, s.Fanout)
		}
		if _, ok := target.(bench.Cleaner); !ok {
			t.Errorf("%s: no Cleanup; the harness deletes every destination after its scenario", s.Name)
		}
		if err := target.Close(); err != nil { // nothing dialled yet
			t.Errorf("%s: Close before use: %v", s.Name, err)
		}
	}
	if _, err := New("kafka", ""); err == nil {
		t.Error("an unknown system was accepted")
	}
	if _, err := New(bench.PeerNATS, "nats://10.0.0.1:4222"); err == nil || !strings.Contains(err.Error(), "non-loopback") {
		t.Errorf("a non-loopback URL: err = %v", err)
	}
	if _, err := Ready(context.Background(), bench.PeerRedisStreams, "redis://example.com:6379"); err == nil {
		t.Error("Ready dialled a non-loopback URL")
	}
}

// A quorum or classic queue has no fanout: Run says unsupported without
// dialling; the stream queue refuses end-to-end.
func TestQueueTypesAndScenarios(t *testing.T) {
	quorum, _ := New(bench.PeerRabbitQuorum, "amqp://guest:guest@127.0.0.1:1/")
	line, status := bench.Run(quorum, bench.Workload{Scenario: bench.ScenarioFanout, Msgs: 10, SizeBytes: 64,
		Producers: 1, Consumers: 1, Window: 1, Prefetch: 1}, bench.RunOptions{System: bench.PeerRabbitQuorum, Timeout: time.Second})
	if status != bench.StatusUnsupported {
		t.Fatalf("quorum fanout: %s", line)
	}
	stream, _ := New(bench.PeerRabbitStream, "amqp://guest:guest@127.0.0.1:1/")
	err := stream.Prepare(context.Background(), bench.Workload{Scenario: bench.ScenarioEndToEnd})
	if err == nil || !strings.Contains(err.Error(), "not a stream") {
		t.Fatalf("stream end-to-end: %v", err)
	}
}

func TestNATSConfigurationIsTheHarnesss(t *testing.T) {
	for scenario, want := range map[string]struct {
		name, subject string
		retention     jetstream.RetentionPolicy
	}{
		bench.ScenarioConfirmedPublish: {"BENCH_CP", "bench.cp", jetstream.LimitsPolicy},
		bench.ScenarioEndToEnd:         {"BENCH_E2E", "bench.e2e", jetstream.WorkQueuePolicy},
		bench.ScenarioFanout:           {"BENCH_FANOUT", "bench.fanout", jetstream.LimitsPolicy},
	} {
		cfg, err := natsStreamConfig(scenario)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Name != want.name || !slices.Equal(cfg.Subjects, []string{want.subject}) || cfg.Retention != want.retention ||
			cfg.Storage != jetstream.FileStorage || cfg.Replicas != 1 || cfg.MaxMsgs != -1 || cfg.MaxBytes != -1 ||
			cfg.Discard != jetstream.DiscardOld {
			t.Errorf("%s: %+v", scenario, cfg)
		}
	}
	if _, err := natsStreamConfig("sweep"); err == nil {
		t.Error("an unknown scenario got a stream")
	}
	c := natsConsumerConfig("work", 2048)
	if c.Durable != "work" || c.DeliverPolicy != jetstream.DeliverAllPolicy || c.AckPolicy != jetstream.AckExplicitPolicy ||
		c.AckWait != 30*time.Second || c.MaxAckPending != 2048 || c.MaxDeliver != -1 {
		t.Errorf("consumer %+v", c)
	}
}

func TestRabbitAndRedisNames(t *testing.T) {
	if got := rabbitQueueName(bench.ScenarioEndToEnd, "quorum"); got != "bench.end-to-end.quorum" {
		t.Errorf("queue %q", got)
	}
	for scenario, want := range map[string]string{bench.ScenarioConfirmedPublish: "bench:cp",
		bench.ScenarioEndToEnd: "bench:e2e", bench.ScenarioFanout: "bench:fanout"} {
		if got, err := redisKey(scenario); err != nil || got != want {
			t.Errorf("redisKey(%s) = %q, %v", scenario, got, err)
		}
	}
}

func TestRedisClientUsesOneConnectionAndNeverRetries(t *testing.T) {
	opt, err := redisOptions("redis://127.0.0.1:6379/0", "x")
	if err != nil {
		t.Fatal(err)
	}
	if opt.PoolSize != 1 || opt.PipelinePoolSize >= 0 || opt.MaxRetries != -1 || opt.Protocol != 2 ||
		opt.ReadTimeout != 30*time.Second || opt.WriteTimeout != 30*time.Second || !opt.DisableIdentity || opt.ClientName != "x" {
		t.Errorf("options %+v", opt)
	}
	if got := infoField("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "redis_version"); got != "7.0.15" {
		t.Errorf("infoField = %q", got)
	}
}

func TestPollRemaining(t *testing.T) {
	defer func(polls int, every time.Duration) { remainingPolls, remainingPollEvery = polls, every }(remainingPolls, remainingPollEvery)
	remainingPolls, remainingPollEvery = 5, time.Millisecond
	ctx := context.Background()
	answers := func(vals ...int64) func(context.Context) (int64, error) {
		i := 0
		return func(context.Context) (int64, error) {
			v := vals[min(i, len(vals)-1)]
			i++
			if v < 0 {
				return -1, errors.New("broken")
			}
			return v, nil
		}
	}
	for _, c := range []struct {
		name    string
		answers []int64
		want    int64
		wantErr bool
	}{
		{"empty at once", []int64{0}, 0, false},
		{"drains", []int64{7, 3, 0}, 0, false},
		{"never drains: the last answer after the bound", []int64{9, 8, 7, 6, 5, 4}, 5, false},
		{"first question fails", []int64{-1}, -1, true},
		{"a later failure keeps the last answer", []int64{4, -1}, 4, false},
	} {
		got, err := pollRemaining(ctx, answers(c.answers...))
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("%s: %d, %v; want %d (error %v)", c.name, got, err, c.want, c.wantErr)
		}
	}
}
