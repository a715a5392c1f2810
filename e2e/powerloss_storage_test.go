package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/io/logstore"
)

// Regression tests for what the power-loss loop found in the storage path,
// on the lazy filesystem without a broker (fast and exact).

// TestPowerLossKeepsNewQueueDirectories: a log opened in a directory whose
// parents do not exist yet (queues/<topic>/<partition> on a queue's first
// use), then appended and synced, survives a power loss. Without the fix
// (storage's syncAncestors), Open fsyncs only the partition directory's
// parent, so the new
// queues/ and queues/<topic>/ entries could be lost, taking every confirmed
// entry of the queue with them (seen in the loop: confirmed messages lost
// and their offsets reused).
func TestPowerLossKeepsNewQueueDirectories(t *testing.T) {
	fsys, mnt := mountLazy(t, uint64(envInt("FIBRIL_E2E_POWERLOSS_SEED", 1)))
	data := filepath.Join(mnt, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	syncPath(t, mnt)
	const rounds = 12
	for round := 0; round < rounds; round++ {
		dir := filepath.Join(data, "queues-"+strconv.Itoa(round), "topic", "0")
		log, _, err := logstore.Open(dir, logstore.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		payload := bytes.Repeat([]byte{byte(round + 1)}, 300) // a blob file too
		entry := core.Entry{Epoch: 1, Index: 1, Kind: core.EntryPublish, Offset: 0, Body: &core.Body{Payload: payload}}
		if err := log.Append([]core.Entry{entry}); err != nil {
			t.Fatal(err)
		}
		if err := log.Sync(); err != nil {
			t.Fatal(err)
		}
		log.Close()
		report, err := fsys.PowerLoss(nil)
		if err != nil {
			t.Fatal(err)
		}
		log, rec, err := logstore.Open(dir, logstore.DefaultOptions())
		if err != nil {
			t.Fatalf("round %d: reopening after %s: %v", round, report, err)
		}
		if len(rec.Entries) != 1 {
			log.Close()
			t.Fatalf("round %d (seed %d): a synced entry is gone after the power loss (%d entries back; %s)", round, fsys.Seed(), len(rec.Entries), report)
		}
		log.Close()
	}
}
