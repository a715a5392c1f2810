package ctl

// Local commands on a data directory: cert generate | fingerprint | issue,
// secret generate. They need no running broker.
//
// Invariants:
//   - cert generate never replaces an existing CA (transport/certs keeps it,
//     so pins stay valid); it only mints what is missing or re-mints the leaf
//     for new names.
//   - secret generate writes <data_dir>/cluster.secret with mode 0600 through
//     a temporary file and a rename, and refuses to replace an existing secret
//     without --force (the nodes of a cluster share it).
//   - The secret is printed only with --show.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fibril-go/fibril/transport/certs"
)

// clusterSecretFileName is the broker's lookup of last resort (SPEC 10).
const clusterSecretFileName = "cluster.secret"

// clusterSecretBytes of randomness, printed as hex.
const clusterSecretBytes = 32

// pemBytesMax bounds a PEM file read by cert fingerprint.
const pemBytesMax = 1 << 20

// sanList collects --san values (repeatable, comma-separated allowed).
type sanList []string

func (s *sanList) String() string { return strings.Join(*s, ",") }
func (s *sanList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*s = append(*s, part)
		}
	}
	return nil
}

func certCmd() *command {
	return &command{
		name: "cert", summary: "make and inspect TLS material (local files, no broker needed)",
		subs: []*command{certGenerateCmd(), certFingerprintCmd(), certIssueCmd()},
	}
}

func certGenerateCmd() *command {
	var dataDir string
	var sans sanList
	return &command{
		name: "generate", summary: "create the broker's CA and server certificate in <data-dir>/tls (kept if present)",
		long: "The server certificate names localhost, 127.0.0.1, ::1, this host and every --san;\na new --san re-mints it from the same CA, so CA pins stay valid.",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dataDir, "data-dir", "", "the broker's data directory (default: server.data_dir from --config, else "+dataDirDefault+")")
			fs.Var(&sans, "san", "extra DNS name or IP the server certificate must carry (repeatable)")
		},
		action: func(r *run) error {
			dir := r.g.dataDirFor(dataDir)
			m, err := certs.LoadOrCreate(dir, sans...)
			if err != nil {
				return fail(exitFailed, "%v", err)
			}
			names := append(append([]string{}, m.LeafCert.DNSNames...), ipStrings(m)...)
			if r.g.json.value {
				r.printValue(map[string]any{
					"dir": m.Dir, "ca_fingerprint_sha256": m.CAFingerprintSHA256,
					"leaf_fingerprint_sha256": m.LeafFingerprintSHA256, "leaf_names": names,
					"leaf_not_after": m.LeafCert.NotAfter.UTC(),
				})
				return nil
			}
			r.out("TLS material in %s\n", m.Dir)
			r.out("CA fingerprint (pin this): %s\n", m.CAFingerprintSHA256)
			r.out("server certificate:        %s\n", m.LeafFingerprintSHA256)
			r.out("server names:              %s\n", strings.Join(names, ", "))
			r.out("valid until:               %s\n", m.LeafCert.NotAfter.UTC().Format("2006-01-02"))
			return nil
		},
	}
}

func ipStrings(m *certs.Material) []string {
	out := make([]string, len(m.LeafCert.IPAddresses))
	for i, ip := range m.LeafCert.IPAddresses {
		out[i] = ip.String()
	}
	return out
}

func certFingerprintCmd() *command {
	return &command{
		name: "fingerprint", summary: "print the SHA-256 fingerprint of a PEM certificate (what clients pin)",
		args: "<pem-file>", minArgs: 1, maxArgs: 1,
		action: func(r *run) error {
			path := r.args[0]
			info, err := os.Stat(path)
			if err != nil {
				return fail(exitNotFound, "%v", err)
			}
			if info.Size() > pemBytesMax {
				return fail(exitUsage, "%s is over %d bytes; is it a certificate?", path, pemBytesMax)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return fail(exitFailed, "%v", err)
			}
			fp, err := certs.FingerprintPEM(data)
			if err != nil {
				return fail(exitUsage, "%s: %v", path, err)
			}
			if r.g.json.value {
				r.printValue(map[string]string{"file": path, "fingerprint_sha256": fp})
				return nil
			}
			r.out("%s\n", fp)
			return nil
		},
	}
}

func certIssueCmd() *command {
	var dataDir, outDir string
	var force bool
	return &command{
		name: "issue", summary: "issue a client certificate for a user (mTLS), signed by the broker's CA",
		args: "<identity>", minArgs: 1, maxArgs: 1,
		long: "Writes <out-dir>/<identity>.pem (certificate, then the CA) and <out-dir>/<identity>.key (0600).\nWith tls.client_auth on, the broker maps the certificate to the user named <identity>.",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dataDir, "data-dir", "", "the broker's data directory holding tls/ca.pem and tls/ca.key (default: server.data_dir from --config, else "+dataDirDefault+")")
			fs.StringVar(&outDir, "out-dir", ".", "directory to write the certificate and key to")
			fs.BoolVar(&force, "force", false, "replace existing files")
		},
		action: func(r *run) error {
			if err := certs.ValidateIdentity(r.args[0]); err != nil {
				return &usageError{cmd: r.cmd, msg: err.Error()}
			}
			issued, err := certs.IssueClient(r.g.dataDirFor(dataDir), r.args[0], outDir, force)
			if err != nil {
				if strings.Contains(err.Error(), "exists; remove it") {
					return fail(exitConflict, "%v", err)
				}
				return fail(exitFailed, "%v", err)
			}
			if r.g.json.value {
				r.printValue(map[string]any{"identity": r.args[0], "cert": issued.CertPath, "key": issued.KeyPath,
					"fingerprint_sha256": issued.FingerprintSHA256, "not_after": issued.NotAfter.UTC()})
				return nil
			}
			r.out("issued %s: %s, %s\nfingerprint %s, valid until %s\n", r.args[0], issued.CertPath, issued.KeyPath,
				issued.FingerprintSHA256, issued.NotAfter.UTC().Format("2006-01-02"))
			return nil
		},
	}
}

func secretCmd() *command {
	var dataDir string
	var show, force bool
	return &command{
		name: "secret", summary: "make the cluster secret nodes authenticate with",
		subs: []*command{{
			name: "generate", summary: "write a new random <data-dir>/cluster.secret (0600)",
			long: "Copy the same file to every node of a cluster (or set FIBRIL_CLUSTER_SECRET).",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&dataDir, "data-dir", "", "the broker's data directory (default: server.data_dir from --config, else "+dataDirDefault+")")
				fs.BoolVar(&show, "show", false, "also print the secret")
				fs.BoolVar(&force, "force", false, "replace an existing secret (every node must then get the new one)")
			},
			action: func(r *run) error {
				dir := r.g.dataDirFor(dataDir)
				path := filepath.Join(dir, clusterSecretFileName)
				if _, err := os.Stat(path); err == nil && !force {
					return fail(exitConflict, "%s exists; the nodes of a cluster share it, so replacing it needs --force", path)
				} else if err != nil && !errors.Is(err, os.ErrNotExist) {
					return fail(exitFailed, "%v", err)
				}
				secret, err := writeSecret(dir, path)
				if err != nil {
					return fail(exitFailed, "%v", err)
				}
				if r.g.json.value {
					out := map[string]string{"path": path}
					if show {
						out["secret"] = secret
					}
					r.printValue(out)
					return nil
				}
				r.out("wrote %s\n", path)
				if show {
					r.out("%s\n", secret)
				}
				return nil
			},
		}},
	}
}

// writeSecret makes a random secret and writes it to path: 0600, temp file,
// fsync, rename, fsync of the directory.
func writeSecret(dir, path string) (string, error) {
	raw := make([]byte, clusterSecretBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("crypto/rand: %w", err)
	}
	secret := hex.EncodeToString(raw)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+clusterSecretFileName+".tmp*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", err
	}
	if _, err := tmp.WriteString(secret + "\n"); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return secret, nil
}
