package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fibril-go/fibril/io/broker"
)

// TestPowerLossKeepsAFreshDataDirectory: a broker started on a data
// directory that does not exist yet creates it (and its parents); once New
// returned and Close flushed, a power loss must not take the directory and
// the Node log in it. The power-loss loop reported this as a hole (it had to
// create its data directory durably itself). storage's Open fsyncs every
// ancestor of a log directory, the Node log's included; without that the
// lazy filesystem drops the data directory at a seeded chance.
func TestPowerLossKeepsAFreshDataDirectory(t *testing.T) {
	fsys, mnt := mountLazy(t, uint64(envInt("FIBRIL_E2E_POWERLOSS_SEED", 1)))
	const rounds = 8
	for round := 0; round < rounds; round++ {
		data := filepath.Join(mnt, "fresh-"+strconv.Itoa(round), "data")
		cfg := broker.DefaultConfig()
		cfg.DataDir = data
		b, err := broker.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		report, err := fsys.PowerLoss(nil)
		if err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(filepath.Join(data, "node"))
		if err != nil || len(entries) == 0 {
			t.Fatalf("round %d (seed %d): the data directory's Node log is gone after the power loss (%v; %s)", round, fsys.Seed(), err, report)
		}
	}
}
