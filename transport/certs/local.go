package certs

// Local trust: "same machine, no certificate handling". A broker publishes its CA
// to a per-user well-known file keyed by its wire port; a client dialing a
// loopback address with no trust options reads it (ClientTLSConfigFor).
//
// Invariants:
//   - The file lives under the user's config directory (os.UserConfigDir, which
//     honours XDG_CONFIG_HOME): <config>/fibril/trust/<port>.pem, in a 0700 dir.
//   - A file or directory writable by group or others is ignored: otherwise another
//     local user could plant a CA and impersonate the broker on that port.
//   - Only loopback dials consult it; a remote dial never does.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// localTrustBytesMax bounds what LocalTrust reads: a CA PEM is about 1 KiB.
const localTrustBytesMax = 64 << 10

// LocalTrustPath returns where the CA of a broker on port is published for the
// current user.
func LocalTrustPath(port int) (string, error) {
	configDir, err := os.UserConfigDir()
	if err != nil || configDir == "" {
		return "", fmt.Errorf("%w: %v", errNoLocalTrustDir, err)
	}
	return filepath.Join(configDir, "fibril", "trust", strconv.Itoa(port)+".pem"), nil
}

// PublishLocalTrust writes m's CA to LocalTrustPath(port) so that clients of the
// same user on this machine trust the broker without configuration. It returns
// the path written.
func PublishLocalTrust(m *Material, port int) (string, error) {
	path, err := LocalTrustPath(port)
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("certs: create %s: %w", dir, err)
	}
	// MkdirAll keeps an existing directory's mode; tighten it so LocalTrust accepts it.
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", fmt.Errorf("certs: chmod %s: %w", dir, err)
	}
	if err := writeFileAtomic(path, m.CAPEM, 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// LocalTrust returns the CA PEM published for port, and false when there is none
// or its file or directory is writable by other users.
func LocalTrust(port int) (caPEM []byte, ok bool) {
	path, err := LocalTrustPath(port)
	if err != nil {
		return nil, false
	}
	for _, p := range []string{filepath.Dir(path), path} {
		info, err := os.Stat(p)
		if err != nil || info.Mode().Perm()&0o022 != 0 {
			return nil, false
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, localTrustBytesMax+1))
	if err != nil || len(data) > localTrustBytesMax {
		return nil, false
	}
	if _, err := parseCertPEM(data); err != nil {
		return nil, false
	}
	return data, true
}
