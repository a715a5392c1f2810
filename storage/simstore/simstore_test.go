package simstore

import (
	"testing"

	"github.com/fibril-go/fibril/storage"
	"github.com/fibril-go/fibril/storage/simfs"
	"github.com/fibril-go/fibril/storage/storagetest"
)

// TestEnvRunsStorageOnTheSimulation: a log and a record log opened through
// Env live in the simulated filesystem only, and what was synced survives
// a power loss.
func TestEnvRunsStorageOnTheSimulation(t *testing.T) {
	fs := simfs.New(simfs.Options{})
	env := Env(fs)
	l, _, err := storage.Open(env, "/n1/q", storage.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	entries := storagetest.PublishEntries(1, 20, 1000)
	if err := l.Append(entries); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	rl, _, err := storage.OpenRecordLog(env, "/n1/node", storage.DefaultRecordLogOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := rl.Append([]storage.Record{{Index: 1, Data: []byte("boot")}}); err != nil {
		t.Fatal(err)
	}
	if err := rl.Sync(); err != nil {
		t.Fatal(err)
	}
	fs.PowerLoss()
	_, rec, err := storage.Open(env, "/n1/q", storage.DefaultOptions())
	if err != nil || len(rec.Entries) != 20 {
		t.Fatalf("after a power loss: %d entries, %v", len(rec.Entries), err)
	}
	_, nrec, err := storage.OpenRecordLog(env, "/n1/node", storage.DefaultRecordLogOptions())
	if err != nil || len(nrec.Records) != 1 || string(nrec.Records[0].Data) != "boot" {
		t.Fatalf("record log after a power loss: %+v, %v", nrec, err)
	}
	if c := fs.Counters(); c.PowerLosses != 1 {
		t.Fatalf("counters %+v", c)
	}
}
