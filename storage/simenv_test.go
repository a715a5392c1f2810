package storage

// simBackendReady: the simulated backend is not wired in yet.
const simBackendReady = false

func newSimEnv() Env { panic("storage tests: the simulated backend is not wired in yet") }
