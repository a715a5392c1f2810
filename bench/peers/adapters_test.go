package peers

// Each adapter against a real server (servers_test.go starts it, or the test
// skips): every scenario the system takes runs through bench.Run at a tiny
// size and must lose, duplicate and leave nothing, with confirms for every
// message; Cleanup must have deleted the destination; the readiness facts
// must be what the script checks. A window of 1 checks that a producer's
// buffers and slots come back with every confirmation. Nothing is timed.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fibril-go/fibril/bench"
)

const (
	testMsgs    = 600
	testReaders = 3
)

func testWorkload(scenario string, window int) bench.Workload {
	return bench.Workload{Scenario: scenario, Msgs: testMsgs, SizeBytes: 256, Producers: 2, Consumers: 2,
		Window: window, Prefetch: 16}
}

// runScenario runs one scenario on a fresh target and checks the line.
func runScenario(t *testing.T, system, url string, pid int, w bench.Workload) map[string]string {
	t.Helper()
	if w.Scenario == bench.ScenarioFanout {
		w.Consumers = testReaders
	}
	target, err := New(system, url)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	line, status := bench.Run(target, w, bench.RunOptions{System: system, RunLabel: "t", Timeout: 60 * time.Second, ServerPID: pid})
	fields, err := bench.ParseLine(line.String())
	if err != nil {
		t.Fatal(err)
	}
	if status != bench.StatusOK {
		t.Fatalf("%s %s (window %d): %s", system, w.Scenario, w.Window, line)
	}
	msgs := strconv.Itoa(w.Msgs)
	want := map[string]string{"system": system, "scenario": w.Scenario, "nacked": "0"}
	switch w.Scenario {
	case bench.ScenarioConfirmedPublish:
		want["confirmed"], want["dup_confirms"] = msgs, "0"
	case bench.ScenarioEndToEnd:
		for k, v := range map[string]string{"delivered": msgs, "unique": msgs, "missing": "0", "dups": "0", "left": "0"} {
			want[k] = v
		}
	case bench.ScenarioFanout:
		records := strconv.Itoa(w.Msgs * w.Consumers)
		for k, v := range map[string]string{"records": records, "delivered": records, "missing": "0", "dups": "0"} {
			want[k] = v
		}
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("%s %s: %s=%s, want %s (%s)", system, w.Scenario, k, fields[k], v, line)
		}
	}
	if pid > 0 && (fields["server_cpu_s"] == "" || fields["server_rss_mb"] == "") {
		t.Errorf("%s: no server CPU/RSS for pid %d: %s", system, pid, line)
	}
	return fields
}

func TestRedisStreamsAgainstARealServer(t *testing.T) {
	url, pid := startRedis(t)
	facts, err := WaitReady(context.Background(), bench.PeerRedisStreams, url)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(facts); got != "[[version "+facts[0][1]+"] [appendonly yes] [appendfsync always] [save ]]" {
		t.Errorf("facts %s", got)
	}
	for _, scenario := range []string{bench.ScenarioConfirmedPublish, bench.ScenarioEndToEnd, bench.ScenarioFanout} {
		for _, window := range []int{1, 64} {
			runScenario(t, bench.PeerRedisStreams, url, pid, testWorkload(scenario, window))
		}
	}
	paced := testWorkload(bench.ScenarioEndToEnd, 64)
	paced.RateMsgsPerSec = 2000
	if f := runScenario(t, bench.PeerRedisStreams, url, pid, paced); f["rate"] != "2000" {
		t.Errorf("paced line without its rate: %v", f)
	}
	c, err := redisConnect(context.Background(), url, "check")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n, err := c.Exists(context.Background(), "bench:cp", "bench:e2e", "bench:fanout").Result()
	if err != nil || n != 0 {
		t.Errorf("%d stream keys left after Cleanup (%v)", n, err)
	}
}

func testNATS(t *testing.T, system string, syncAlways bool) {
	url, pid := startNATS(t, syncAlways)
	facts, err := WaitReady(context.Background(), system, url)
	if err != nil || len(facts) != 1 || facts[0][0] != "version" || facts[0][1] == "" {
		t.Fatalf("ready: %v %v", facts, err)
	}
	for _, scenario := range []string{bench.ScenarioConfirmedPublish, bench.ScenarioEndToEnd, bench.ScenarioFanout} {
		for _, window := range []int{1, 64} {
			runScenario(t, system, url, pid, testWorkload(scenario, window))
		}
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for _, stream := range []string{"BENCH_CP", "BENCH_E2E", "BENCH_FANOUT"} {
		if _, err := js.Stream(context.Background(), stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("stream %s after Cleanup: %v", stream, err)
		}
	}
}

func TestNATSJetStreamAgainstARealServer(t *testing.T) { testNATS(t, bench.PeerNATS, false) }

func TestNATSJetStreamSyncAgainstARealServer(t *testing.T) { testNATS(t, bench.PeerNATSSync, true) }

func TestRabbitMQAgainstARealServer(t *testing.T) {
	url, pid := startRabbit(t)
	facts, err := WaitReady(context.Background(), bench.PeerRabbitQuorum, url)
	if err != nil || facts[0][1] == "" {
		t.Fatalf("ready: %v %v", facts, err)
	}
	for _, system := range []string{bench.PeerRabbitQuorum, bench.PeerRabbitClassic} {
		for _, scenario := range []string{bench.ScenarioConfirmedPublish, bench.ScenarioEndToEnd} {
			for _, window := range []int{1, 64} {
				runScenario(t, system, url, pid, testWorkload(scenario, window))
			}
		}
	}
	for _, window := range []int{1, 64} {
		runScenario(t, bench.PeerRabbitStream, url, pid, testWorkload(bench.ScenarioFanout, window))
	}
	runScenario(t, bench.PeerRabbitStream, url, pid, testWorkload(bench.ScenarioConfirmedPublish, 64))
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"bench.confirmed-publish.quorum", "bench.end-to-end.classic", "bench.fanout.stream"} {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err == nil {
			t.Errorf("queue %s survived Cleanup", q)
			ch.Close()
		}
	}
}
