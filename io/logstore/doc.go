// Package logstore is the production storage of a partition's log and of
// the Node's record log: package storage's code over the operating
// system's files and tidwall/wal (package osfs), plus the Committer, the
// group-commit goroutine shell around storage.Planner. Its exported names
// are aliases of storage's or one-line wrappers supplying the production
// Env (logstore.go), so callers keep the API they had. storage's doc says
// what is on disk, how durability works and what recovery does;
// docs/storage.md describes the layer and what the simulator does not run.
package logstore
