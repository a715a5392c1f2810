package e2e

// Recovery quarantine against the real binary (SPEC 7, docs/admin.md):
// messages in two queues, a clean stop, one partition's last record
// damaged on disk (bytes flipped, or the file cut in the middle of it), a
// restart. Under quarantine (the default) the damaged queue refuses with
// the quarantine message while the other serves, /readyz says degraded,
// the listing and the metrics show it, and a repair cuts at the last valid
// record and serves again; refuse makes /readyz 503; ignore cuts and serves.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fibril-go/fibril/client"
)

// stop sends SIGTERM and waits: the broker closes its logs cleanly.
func (s *server) stop() {
	s.t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		s.t.Fatalf("the broker did not stop on SIGTERM\n%s", s.log.String())
	}
	s.cmd = nil
}

const quarantineMessages = 5

// damage says how the last record of a partition is broken.
type damage int

const (
	damageFlip     damage = 1 // bytes flipped in the middle of the last record
	damageTruncate damage = 2 // the file cut in the middle of the last record
)

// quarantineSetup starts a broker with an admin listener and args, puts
// quarantineMessages messages in q-bad and q-good, stops it cleanly and
// damages q-bad's last record. It returns the data directory.
func quarantineSetup(t *testing.T, how damage) string {
	t.Helper()
	dir := t.TempDir()
	s := startServer(t, dir)
	c := dial(t, s, client.TransportTCP)
	for i := range quarantineMessages {
		publishText(t, c, "q-bad", "bad-"+strconv.Itoa(i))
		publishText(t, c, "q-good", "good-"+strconv.Itoa(i))
	}
	c.Close()
	s.stop()
	damageLastRecord(t, filepath.Join(dir, "queues", "q-bad", "0"), how)
	return dir
}

// damageLastRecord breaks the last record of the newest segment in dir
// (tidwall's frames: a uvarint length, then the record).
func damageLastRecord(t *testing.T, dir string, how damage) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var segments []string
	for _, e := range entries {
		if len(e.Name()) == 20 && strings.Trim(e.Name(), "0123456789") == "" {
			segments = append(segments, e.Name())
		}
	}
	sort.Strings(segments)
	if len(segments) == 0 {
		t.Fatalf("no segment in %s", dir)
	}
	file := filepath.Join(dir, segments[len(segments)-1])
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	last, lastLen := -1, 0
	for pos := 0; pos < len(data); {
		n, w := binary.Uvarint(data[pos:])
		if w <= 0 || pos+w+int(n) > len(data) {
			t.Fatalf("%s does not frame at byte %d", file, pos)
		}
		last, lastLen = pos, w+int(n)
		pos += w + int(n)
	}
	if last < 0 || lastLen < 8 {
		t.Fatalf("no record to damage in %s", file)
	}
	switch how {
	case damageFlip:
		mid := last + lastLen/2
		data[mid] ^= 0xff
		data[mid+1] ^= 0x5a
		err = os.WriteFile(file, data, 0o644)
	case damageTruncate:
		err = os.Truncate(file, int64(last+lastLen/2))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// adminPost POSTs path (no body) and returns the status and body.
func adminPost(t *testing.T, base, path string) (int, string) {
	t.Helper()
	hc := http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Post(base+path, "", nil)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// startWithAdmin restarts on dir with an admin listener and the policy,
// and waits until /readyz answers (any status but "starting").
func startWithAdmin(t *testing.T, dir, policy string) (*server, string) {
	t.Helper()
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	s := startServer(t, dir, "--admin-listen", adminAddr, "--recovery-on-mismatch", policy)
	base := "http://" + adminAddr
	eventually(t, 5000, 20, func() bool { status, _ := adminGet(t, base, "/readyz"); return status == http.StatusOK })
	return s, base
}

// wantQuarantineRefusal publishes to q-bad and wants the quarantine error.
func wantQuarantineRefusal(t *testing.T, c *client.Client) {
	t.Helper()
	_, err := c.Publisher("q-bad").PublishConfirmed(ctxT(t), client.Text("refused"))
	var be *client.BrokerError
	if !errors.As(err, &be) || be.Code != client.CodeInternal ||
		!strings.Contains(be.Message, "partition q-bad/0 is quarantined: ") ||
		!strings.Contains(be.Message, "repair with POST /admin/api/quarantine/repair or fibrilctl admin quarantine repair") {
		t.Fatalf("publish to the damaged queue: %v, want the quarantine error", err)
	}
}

// consumeTexts subscribes to topic and takes n deliveries, acking each.
func consumeTexts(t *testing.T, c *client.Client, topic string, n int) []string {
	t.Helper()
	ctx := ctxT(t)
	sub, err := c.SubscribeTopic(ctx, topic, client.SubscribeOptions{Prefetch: 16})
	if err != nil {
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	var got []string
	for range n {
		d := next(t, sub, 10*time.Second)
		got = append(got, d.Text())
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	nothing(t, sub, 300*time.Millisecond)
	_ = sub.Close()
	return got
}

func wantPrefix(t *testing.T, got []string, prefix string, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("got %d messages %v, want %d", len(got), got, n)
	}
	for i, text := range got {
		if text != prefix+strconv.Itoa(i) {
			t.Fatalf("message %d is %q, want %s%d (all: %v)", i, text, prefix, i, got)
		}
	}
}

func TestQuarantineDamagedPartitionAndRepair(t *testing.T) {
	for _, tc := range []struct {
		name string
		how  damage
	}{{"flipped-last-record", damageFlip}, {"truncated-mid-record", damageTruncate}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := quarantineSetup(t, tc.how)
			s, base := startWithAdmin(t, dir, "quarantine")
			// Detection is lazy: ready and ok before anything touches it.
			if status, body := adminGet(t, base, "/readyz"); status != http.StatusOK || body != "ok\n" {
				t.Fatalf("/readyz before the first touch = %d %q", status, body)
			}
			c := dial(t, s, client.TransportTCP)
			wantQuarantineRefusal(t, c)
			wantQuarantineRefusal(t, c) // parked: refused again, no reload
			_, err := c.SubscribeTopic(ctxT(t), "q-bad", client.SubscribeOptions{Prefetch: 4})
			if err == nil || !strings.Contains(err.Error(), "partition q-bad/0 is quarantined") {
				t.Fatalf("subscribe to the damaged queue: %v, want the quarantine error", err)
			}
			// The other queue serves: its messages, then a new one.
			publishText(t, c, "q-good", "good-"+strconv.Itoa(quarantineMessages))
			wantPrefix(t, consumeTexts(t, c, "q-good", quarantineMessages+1), "good-", quarantineMessages+1)

			status, body := adminGet(t, base, "/readyz")
			var ready struct {
				Ready, Degraded bool
				Quarantined     []map[string]any
			}
			if status != http.StatusOK || json.Unmarshal([]byte(body), &ready) != nil || !ready.Ready || !ready.Degraded ||
				len(ready.Quarantined) != 1 || ready.Quarantined[0]["topic"] != "q-bad" {
				t.Fatalf("/readyz while quarantined = %d %s", status, body)
			}
			status, body = adminGet(t, base, "/admin/api/quarantine")
			var list struct {
				Quarantined []struct {
					Topic, Group, Kind, Reason string
					Partition                  uint32
					DetectedAtMs               int64 `json:"detected_at_ms"`
					Index                      uint64
				}
			}
			if status != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil || len(list.Quarantined) != 1 {
				t.Fatalf("GET /admin/api/quarantine = %d %s", status, body)
			}
			if q := list.Quarantined[0]; q.Topic != "q-bad" || q.Partition != 0 || q.Kind != "checksum" || q.Reason == "" || q.DetectedAtMs == 0 || q.Index == 0 {
				t.Fatalf("listed %+v", q)
			}
			m := scrapeFibril(t, base)
			if m["fibril_recovery_quarantined"] != 1 || m["fibril_recovery_quarantines_total"] != 1 {
				t.Fatalf("quarantine metrics %v / %v", m["fibril_recovery_quarantined"], m["fibril_recovery_quarantines_total"])
			}

			// Repairs: an unknown partition 404, one that serves 409, a bad
			// parameter 400, then the damaged one.
			for path, want := range map[string]int{
				"/admin/api/quarantine/repair?topic=nope&partition=0":   http.StatusNotFound,
				"/admin/api/quarantine/repair?topic=q-bad&partition=7":  http.StatusNotFound,
				"/admin/api/quarantine/repair?topic=q-good&partition=0": http.StatusConflict,
				"/admin/api/quarantine/repair?topic=q-bad":              http.StatusBadRequest,
			} {
				if status, body := adminPost(t, base, path); status != want {
					t.Fatalf("POST %s = %d %s, want %d", path, status, body, want)
				}
			}
			status, body = adminPost(t, base, "/admin/api/quarantine/repair?topic=q-bad&group=default&partition=0")
			var repaired struct {
				Repaired struct {
					Topic            string
					TruncatedEntries uint64 `json:"truncated_entries"`
				}
			}
			if status != http.StatusOK || json.Unmarshal([]byte(body), &repaired) != nil || repaired.Repaired.Topic != "q-bad" ||
				repaired.Repaired.TruncatedEntries != 1 {
				t.Fatalf("repair = %d %s", status, body)
			}
			if status, body := adminPost(t, base, "/admin/api/quarantine/repair?topic=q-bad&partition=0"); status != http.StatusConflict {
				t.Fatalf("a second repair = %d %s, want 409", status, body)
			}
			status, body = adminGet(t, base, "/admin/api/audit")
			if status != http.StatusOK || !strings.Contains(body, "quarantine.repair") {
				t.Fatalf("the repair is not audited: %d %s", status, body)
			}
			if status, body := adminGet(t, base, "/readyz"); status != http.StatusOK || body != "ok\n" {
				t.Fatalf("/readyz after the repair = %d %q", status, body)
			}
			if m := scrapeFibril(t, base); m["fibril_recovery_quarantined"] != 0 || m["fibril_recovery_quarantines_total"] != 1 {
				t.Fatalf("metrics after the repair %v / %v", m["fibril_recovery_quarantined"], m["fibril_recovery_quarantines_total"])
			}
			// Served again: every message before the cut (the last record
			// was the last publish), then new ones.
			publishText(t, c, "q-bad", "bad-"+strconv.Itoa(quarantineMessages-1))
			wantPrefix(t, consumeTexts(t, c, "q-bad", quarantineMessages), "bad-", quarantineMessages)
			// The repair is on disk: a clean restart loads it.
			c.Close()
			s.stop()
			s, base = startWithAdmin(t, dir, "quarantine")
			c = dial(t, s, client.TransportTCP)
			publishText(t, c, "q-bad", "after-restart")
			if status, body := adminGet(t, base, "/readyz"); status != http.StatusOK || body != "ok\n" {
				t.Fatalf("/readyz after a restart = %d %q", status, body)
			}
		})
	}
}

func TestQuarantineStaysAcrossRestartsUntilRepaired(t *testing.T) {
	dir := quarantineSetup(t, damageFlip)
	s, _ := startWithAdmin(t, dir, "quarantine")
	wantQuarantineRefusal(t, dial(t, s, client.TransportTCP))
	s.stop()
	s, base := startWithAdmin(t, dir, "quarantine")
	wantQuarantineRefusal(t, dial(t, s, client.TransportTCP))
	if status, body := adminGet(t, base, "/admin/api/quarantine"); status != http.StatusOK || !strings.Contains(body, `"topic":"q-bad"`) {
		t.Fatalf("after a second restart: %d %s", status, body)
	}
}

func TestQuarantineRefuseMakesTheNodeNotReady(t *testing.T) {
	dir := quarantineSetup(t, damageFlip)
	s, base := startWithAdmin(t, dir, "refuse")
	c := dial(t, s, client.TransportTCP)
	wantQuarantineRefusal(t, c)
	status, body := adminGet(t, base, "/readyz")
	var ready struct {
		Ready       *bool
		Quarantined []map[string]any
	}
	if status != http.StatusServiceUnavailable || json.Unmarshal([]byte(body), &ready) != nil || ready.Ready == nil || *ready.Ready || len(ready.Quarantined) != 1 {
		t.Fatalf("/readyz under refuse = %d %s", status, body)
	}
	if status, body := adminPost(t, base, "/admin/api/quarantine/repair?topic=q-bad&partition=0"); status != http.StatusOK {
		t.Fatalf("repair under refuse = %d %s", status, body)
	}
	if status, body := adminGet(t, base, "/readyz"); status != http.StatusOK || body != "ok\n" {
		t.Fatalf("/readyz after the repair = %d %q", status, body)
	}
}

func TestQuarantineIgnoreCutsAndServes(t *testing.T) {
	dir := quarantineSetup(t, damageFlip)
	s, base := startWithAdmin(t, dir, "ignore")
	c := dial(t, s, client.TransportTCP)
	publishText(t, c, "q-bad", "bad-"+strconv.Itoa(quarantineMessages-1))
	wantPrefix(t, consumeTexts(t, c, "q-bad", quarantineMessages), "bad-", quarantineMessages)
	if status, body := adminGet(t, base, "/readyz"); status != http.StatusOK || body != "ok\n" {
		t.Fatalf("/readyz under ignore = %d %q", status, body)
	}
	if !strings.Contains(s.log.String(), "cut at the last valid record") {
		t.Fatalf("no warning about the cut in the log:\n%s", s.log.String())
	}
}

// TestQuarantineOfAStreamPartition: the same rules for a stream: a damaged
// last record after a clean stop parks the stream partition (subscribing
// is refused with the quarantine message), the listing says stream, and a
// repair serves the records before the cut.
func TestQuarantineOfAStreamPartition(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir)
	c := dial(t, s, client.TransportTCP)
	ctx := ctxT(t)
	if _, err := c.DeclarePlexus(ctx, client.NewStreamConfig("s-bad")); err != nil {
		t.Fatal(err)
	}
	publishRecords(t, ctx, c, "s-bad", "r", quarantineMessages, nil)
	c.Close()
	s.stop()
	damageLastRecord(t, filepath.Join(dir, "streams", "s-bad", "0"), damageFlip)

	s, base := startWithAdmin(t, dir, "quarantine")
	c = dial(t, s, client.TransportTCP)
	if _, err := c.SubscribeStream(ctx, "s-bad", client.StreamOptions{Start: client.StartEarliest()}); err == nil ||
		!strings.Contains(err.Error(), "partition s-bad/0 is quarantined") {
		t.Fatalf("subscribe to the damaged stream: %v, want the quarantine error", err)
	}
	if status, body := adminGet(t, base, "/admin/api/quarantine"); status != http.StatusOK || !strings.Contains(body, `"partition_kind":"stream"`) {
		t.Fatalf("listing: %d %s", status, body)
	}
	status, body := adminPost(t, base, "/admin/api/quarantine/repair?topic=s-bad&partition=0")
	if status != http.StatusOK || !strings.Contains(body, `"truncated_entries":1`) {
		t.Fatalf("repair = %d %s", status, body)
	}
	sub, err := c.SubscribeStream(ctx, "s-bad", client.StreamOptions{Start: client.StartEarliest()})
	if err != nil {
		t.Fatalf("subscribe after the repair: %v", err)
	}
	expectRecords(t, sub, "r", 0, quarantineMessages-1, false)
	noRecord(t, sub, 300*time.Millisecond)
}
