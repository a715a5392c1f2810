package storage

import (
	"github.com/fibril-go/fibril/storage/simfs"
	"github.com/fibril-go/fibril/storage/simwal"
)

// simBackendReady: the suite runs over simfs and simwal too.
const simBackendReady = true

// testSimFS is the simulated filesystem of the "sim" backend (nil under
// "os"): one for the whole run, since tests use distinct directories.
var testSimFS *simfs.FS

func newSimEnv() Env {
	testSimFS = simfs.New(simfs.Options{})
	return Env{FS: testSimFS, OpenSegmentLog: simwal.Opener(testSimFS)}
}
