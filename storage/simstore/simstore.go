// Package simstore wires package storage to the simulated filesystem and
// segment log, for the simulator:
//
//	fs := simfs.New(simfs.Options{})
//	fs.SetFaults(faults, rng)
//	env := simstore.Env(fs)
//	log, rec, err := storage.Open(env, "/node1/q/orders", storage.DefaultOptions())
//	rl, nrec, err := storage.OpenRecordLog(env, "/node1/node", storage.DefaultRecordLogOptions())
//
// Everything runs inline (no Runner): deterministic, single-threaded. It
// lives apart from storage/simwal so that storage's own tests may import
// simwal without an import cycle.
package simstore

import (
	"github.com/fibril-go/fibril/storage"
	"github.com/fibril-go/fibril/storage/simfs"
	"github.com/fibril-go/fibril/storage/simwal"
)

// Env is storage's environment over fs: simfs files, simwal segments.
func Env(fs *simfs.FS) storage.Env {
	return storage.Env{FS: fs, OpenSegmentLog: simwal.Opener(fs)}
}
