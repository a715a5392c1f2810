package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fibril-go/fibril/mutant"
)

// TestPowerLossCatchesBrokenStorage: the power-loss loop fails on brokers
// built with a deliberately broken storage path (-tags fibril_mutants,
// FIBRIL_MUTANT; see package mutant and cmd/fibril/mutants_on.go), each
// within its cycles, and reports the earliest cycle whose power loss did
// damage the checks found (the run stops at the first cycle the broker
// cannot go on from, so a caught mutant costs a few cycles). -short skips
// it; CI runs it. FIBRIL_E2E_MUTANT_CYCLES sets the cycles (12: every
// mutant was caught within 5 in our runs).
func TestPowerLossCatchesBrokenStorage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the mutant power-loss runs take about two minutes")
	}
	requireFUSE(t)
	bin := mutantBinary(t)
	cycles := envInt("FIBRIL_E2E_MUTANT_CYCLES", 12)
	for _, name := range []string{mutant.DurableOnSubmit, mutant.NoBlobDatasync, mutant.NoDirSync, mutant.AcceptTornTail} {
		t.Run(name, func(t *testing.T) {
			seed := uint64(envInt("FIBRIL_E2E_POWERLOSS_SEED", int(time.Now().UnixNano()&0x7fffffffffff)))
			cfg := powerLossConfig{cycles: cycles, seed: seed, bin: bin, mutant: name}
			if name == mutant.NoDirSync {
				// A snapshot fsyncs its directory, which also makes a new
				// segment's or blob file's entry durable: with a snapshot
				// every few hundred entries the window a missing fsync
				// leaves is milliseconds wide. Snapshots every 100000
				// entries leave it open for the whole run.
				cfg.snapshotEntriesMin = "100000"
				// And a power loss drops every name no directory fsync
				// made durable: with a seeded half kept, the few new
				// names of a run (a partition's first blob file and
				// segments; later ones come rarely) all survived 12
				// cycles once.
				cfg.dropUnsyncedOps = true
			}
			if name == mutant.AcceptTornTail {
				// Caught only when a tear spoils the last complete record
				// of a tail segment or its payload (cycles 1-10 in our
				// runs; once not within 24): four times the cycles.
				cfg.cycles = 4 * cycles
			}
			res := runPowerLoss(t, cfg)
			if res.failures() == "" {
				t.Fatalf("mutant %s survived %d power-loss cycles (seed %d): %s", name, cfg.cycles, seed, res)
			}
			t.Logf("mutant %s caught at cycle %d of %d (seed %d): %s", name, res.caughtAtCycle, res.cycles, seed, res.failures())
		})
	}
}

// TestPowerLossCatchesLostAcks: the loop's fenced-ack judgement is not
// vacuous. On a broker whose recovery drops the ack entries among the last
// entries it replays (mutant RecoveryDropsRecentAcks: confirms, offsets and
// payloads stay right, only recent acks are lost), messages whose acks a
// confirmed fence made durable come back after a power loss, and both the
// loop's own count and the checker (through the history builder's fences)
// must say so. -short skips it.
func TestPowerLossCatchesLostAcks(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a mutant power-loss run takes about half a minute")
	}
	requireFUSE(t)
	bin := mutantBinary(t)
	seed := uint64(envInt("FIBRIL_E2E_POWERLOSS_SEED", int(time.Now().UnixNano()&0x7fffffffffff)))
	cfg := powerLossConfig{cycles: envInt("FIBRIL_E2E_MUTANT_CYCLES", 12), seed: seed, bin: bin, mutant: mutant.RecoveryDropsRecentAcks}
	res := runPowerLoss(t, cfg)
	t.Logf("mutant %s (seed %d): %s", cfg.mutant, seed, res)
	// The mutant may also break the broker outright (a start refused) before
	// any fenced ack came back: the run stopped without exercising the ack
	// judgement, so it says nothing either way. Another seed then, at most
	// twice; a run that went the distance must catch it.
	for retry := 1; retry <= 2 && res.brokerBroken > 0 && res.ackedBack == 0; retry++ {
		cfg.seed = seed + uint64(retry)
		res = runPowerLoss(t, cfg)
		t.Logf("mutant %s (seed %d, after a run the broken broker stopped): %s", cfg.mutant, cfg.seed, res)
	}
	seed = cfg.seed
	if res.ackedBack == 0 || res.checkerViolations == 0 {
		t.Fatalf("mutant %s: %d fenced acked messages came back and the checker found %d violations over %d cycles (seed %d); both must be above 0: %s",
			cfg.mutant, res.ackedBack, res.checkerViolations, res.cycles, seed, res)
	}
	t.Logf("mutant %s caught at cycle %d: %s", cfg.mutant, res.caughtAtCycle, res.failures())
}

var (
	mutantBinOnce sync.Once
	mutantBin     string
	mutantBinErr  error
)

// mutantBinary builds fibril with the mutant switches readable from the
// environment, once per test process.
func mutantBinary(t *testing.T) string {
	mutantBinOnce.Do(func() {
		mutantBin = filepath.Join(filepath.Dir(fibrilBin), "fibril-mutants")
		build := exec.Command("go", "build", "-tags", "fibril_mutants", "-o", mutantBin, "../cmd/fibril")
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		mutantBinErr = build.Run()
	})
	if mutantBinErr != nil {
		t.Fatalf("building fibril with -tags fibril_mutants: %v", mutantBinErr)
	}
	return mutantBin
}
