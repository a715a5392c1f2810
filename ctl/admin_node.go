package ctl

// Admin commands about the node: reload-tls, quarantine, runtime-settings,
// audit, connections.
//
// Invariants:
//   - runtime-settings set sends only the keys given (a partial document) and
//     is a compare-and-set on the version (read first when not given).
//   - A key=value value is JSON when it parses as JSON (numbers, true, false,
//     null, quoted strings), else the text itself as a string.

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

func adminReloadTLSCmd() *command {
	return &command{
		name: "reload-tls", summary: "reload the broker's certificate and key from disk (validated; the old one serves on failure)",
		action: func(r *run) error {
			var ans struct {
				Reloaded          bool   `json:"reloaded"`
				FingerprintSHA256 string `json:"fingerprint_sha256"`
				NotAfter          string `json:"not_after"`
			}
			raw, err := r.doJSON(http.MethodPost, "/admin/api/tls/reload", nil, nil, &ans)
			if err != nil {
				return err
			}
			if r.g.json.value {
				r.printJSON(raw)
				return nil
			}
			if !ans.Reloaded {
				return fail(exitFailed, "the broker did not reload its certificate: %s", strings.TrimSpace(string(raw)))
			}
			r.out("reloaded: fingerprint %s, valid until %s\n", ans.FingerprintSHA256, ans.NotAfter)
			return nil
		},
	}
}

func adminQuarantineCmd() *command {
	var group string
	var partition uint64
	return &command{
		name: "quarantine", summary: "list partitions parked for a damaged log, and repair them",
		subs: []*command{
			{
				name: "list", summary: "list quarantined partitions",
				action: func(r *run) error {
					var ans struct {
						Quarantined []struct {
							Topic        string `json:"topic"`
							Group        string `json:"group"`
							Partition    uint32 `json:"partition"`
							Kind         string `json:"kind"`
							Reason       string `json:"reason"`
							DetectedAtMs int64  `json:"detected_at_ms"`
						} `json:"quarantined"`
					}
					raw, err := r.getJSON("/admin/api/quarantine", nil, &ans)
					if err != nil {
						return err
					}
					if r.g.json.value {
						r.printJSON(raw)
						return nil
					}
					if len(ans.Quarantined) == 0 {
						r.out("no partition is quarantined\n")
						return nil
					}
					t := newTable("QUEUE", "PARTITION", "KIND", "DETECTED", "REASON")
					for _, q := range ans.Quarantined {
						t.add(queueName(q.Topic, q.Group), q.Partition, q.Kind, msTime(q.DetectedAtMs), q.Reason)
					}
					t.print(r)
					return nil
				},
			},
			{
				name: "repair", summary: "truncate a quarantined partition's log to its last valid record and serve it again",
				args: "<topic>", minArgs: 1, maxArgs: 1,
				long: "Entries after the last valid record are lost; the repair is recorded in the audit log.",
				flags: func(fs *flag.FlagSet) {
					fs.StringVar(&group, "group", "", "queue group (namespace); empty is the default")
					fs.Uint64Var(&partition, "partition", 0, "the partition to repair")
				},
				action: func(r *run) error {
					q := url.Values{"topic": {r.args[0]}, "partition": {strconv.FormatUint(partition, 10)}}
					if group != "" {
						q.Set("group", group)
					}
					var ans struct {
						Repaired map[string]any `json:"repaired"`
					}
					raw, err := r.doJSON(http.MethodPost, "/admin/api/quarantine/repair", q, nil, &ans)
					if err != nil {
						return err
					}
					if r.g.json.value {
						r.printJSON(raw)
						return nil
					}
					r.out("repaired %s partition %d: %v entries truncated\n", queueName(r.args[0], group), partition,
						ans.Repaired["truncated_entries"])
					return nil
				},
			},
		},
	}
}

type runtimeSettings struct {
	Version  uint64                    `json:"version"`
	Settings map[string]map[string]any `json:"settings"`
	Locked   []string                  `json:"locked"`
}

func (r *run) printRuntimeSettings(raw []byte, s runtimeSettings) {
	if r.g.json.value {
		r.printJSON(raw)
		return
	}
	r.out("version %d\n", s.Version)
	groups := make([]string, 0, len(s.Settings))
	for g := range s.Settings {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	t := newTable("KEY", "VALUE", "LOCKED")
	for _, g := range groups {
		locked := ""
		for _, l := range s.Locked {
			if l == g {
				locked = "locked"
			}
		}
		keys := make([]string, 0, len(s.Settings[g]))
		for k := range s.Settings[g] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v, _ := json.Marshal(s.Settings[g][k])
			t.add(g+"."+k, string(v), locked)
		}
	}
	t.print(r)
}

func adminRuntimeSettingsCmd() *command {
	var version uint64
	return &command{
		name: "runtime-settings", summary: "show or change the live, persisted runtime settings (versioned)",
		subs: []*command{
			{
				name: "get", summary: "show every runtime setting and the version",
				action: func(r *run) error {
					var s runtimeSettings
					raw, err := r.getJSON("/admin/api/runtime-settings", nil, &s)
					if err != nil {
						return err
					}
					r.printRuntimeSettings(raw, s)
					return nil
				},
			},
			{
				name: "set", summary: "change settings: group.key=value ...",
				args: "<group.key=value>...", minArgs: 1, maxArgs: -1,
				long: "Example: fibrilctl admin runtime-settings set delivery.inflight_ttl_ms=60000 connection.reconnect_grace_ms=10000\nA value is read as JSON when it is valid JSON, else as a string.",
				flags: func(fs *flag.FlagSet) {
					fs.Uint64Var(&version, "expected-version", 0, "refuse (exit 4) unless the current version is this (default: the version read just before)")
				},
				action: func(r *run) error {
					partial, err := settingsPatch(r.args)
					if err != nil {
						return &usageError{cmd: r.cmd, msg: err.Error()}
					}
					if !r.isSet("expected-version") {
						var cur runtimeSettings
						if _, err := r.getJSON("/admin/api/runtime-settings", nil, &cur); err != nil {
							return err
						}
						version = cur.Version
					}
					var s runtimeSettings
					raw, err := r.doJSON(http.MethodPut, "/admin/api/runtime-settings", nil,
						map[string]any{"expected_version": version, "settings": partial}, &s)
					if err != nil {
						return err
					}
					r.printRuntimeSettings(raw, s)
					return nil
				},
			},
		},
	}
}

// settingsPatch turns group.key=value arguments into a partial settings
// document {"group": {"key": value}}.
func settingsPatch(args []string) (map[string]map[string]any, error) {
	patch := map[string]map[string]any{}
	for _, arg := range args {
		path, text, ok := strings.Cut(arg, "=")
		group, key, dotted := strings.Cut(path, ".")
		if !ok || !dotted || group == "" || key == "" {
			return nil, fmt.Errorf("%q: want group.key=value, e.g. delivery.inflight_ttl_ms=30000", arg)
		}
		var value any
		if err := json.Unmarshal([]byte(text), &value); err != nil {
			value = text
		}
		if patch[group] == nil {
			patch[group] = map[string]any{}
		}
		if _, dup := patch[group][key]; dup {
			return nil, fmt.Errorf("%s is given twice", path)
		}
		patch[group][key] = value
	}
	return patch, nil
}

func adminAuditCmd() *command {
	var after, limit uint64
	return &command{
		name: "audit", summary: "show the newest operator actions (the audit ring)",
		flags: func(fs *flag.FlagSet) {
			fs.Uint64Var(&after, "after", 0, "only entries with a sequence number above this")
			fs.Uint64Var(&limit, "limit", 0, "most entries to show (the server keeps 512)")
		},
		action: func(r *run) error {
			q := url.Values{}
			if r.isSet("after") {
				q.Set("after", strconv.FormatUint(after, 10))
			}
			if r.isSet("limit") {
				q.Set("limit", strconv.FormatUint(limit, 10))
			}
			var ans struct {
				Entries []struct {
					Seq     uint64 `json:"seq"`
					AtMs    int64  `json:"at_ms"`
					Actor   string `json:"actor"`
					Action  string `json:"action"`
					Target  string `json:"target"`
					Outcome string `json:"outcome"`
					Detail  string `json:"detail"`
				} `json:"entries"`
			}
			raw, err := r.getJSON("/admin/api/audit", q, &ans)
			if err != nil {
				return err
			}
			if r.g.json.value {
				r.printJSON(raw)
				return nil
			}
			t := newTable("SEQ", "AT", "ACTOR", "ACTION", "TARGET", "OUTCOME", "DETAIL")
			for _, e := range ans.Entries {
				t.add(e.Seq, msTime(e.AtMs), e.Actor, e.Action, e.Target, e.Outcome, e.Detail)
			}
			t.print(r)
			if len(ans.Entries) == 0 {
				r.out("(no operator actions recorded since the broker started)\n")
			}
			return nil
		},
	}
}

// connectionRow is one row of GET /admin/api/connections: a connection
// (id > 0; session 0 while in its handshake), or a dormant session (id 0,
// named by session).
type connectionRow struct {
	ID            uint64 `json:"id"`
	Session       uint64 `json:"session"`
	ClientName    string `json:"client_name"`
	ClientVersion string `json:"client_version"`
	Transport     string `json:"transport"`
	TLS           bool   `json:"tls"`
	Remote        string `json:"remote"`
	SinceMs       int64  `json:"since_ms"`
	Dormant       bool   `json:"dormant"`
	Authenticated bool   `json:"authenticated"`
	Subscriptions int    `json:"subscriptions"` // how many the session holds
}

func listConnections(r *run) error {
	var ans struct {
		Connections []connectionRow `json:"connections"`
	}
	raw, err := r.getJSON("/admin/api/connections", nil, &ans)
	if err != nil {
		return err
	}
	if r.g.json.value {
		r.printJSON(raw)
		return nil
	}
	t := newTable("ID", "SESSION", "CLIENT", "VERSION", "TRANSPORT", "TLS", "REMOTE", "SINCE", "STATE", "SUBSCRIPTIONS")
	for _, c := range ans.Connections {
		id, state := strconv.FormatUint(c.ID, 10), "open"
		switch {
		case c.Dormant:
			id, state = "-", "dormant" // no connection: close it by --session
		case !c.Authenticated:
			state = "handshake"
		}
		t.add(id, c.Session, c.ClientName, c.ClientVersion, c.Transport, c.TLS, c.Remote, msTime(c.SinceMs), state, c.Subscriptions)
	}
	t.print(r)
	if len(ans.Connections) == 0 {
		r.out("(no connections)\n")
	}
	return nil
}

func adminConnectionsCmd() *command {
	return &command{
		name: "connections", summary: "list the client connections and dormant sessions, or force-close one",
		long:   "'admin connections' alone lists them (as 'admin connections list').",
		action: listConnections,
		subs: []*command{
			{name: "list", summary: "list the connections and dormant sessions", action: listConnections},
			connectionsCloseCmd(),
		},
	}
}

func connectionsCloseCmd() *command {
	var session uint64
	return &command{
		name: "close", summary: "force-close a connection (its session ends: no resume, unsettled deliveries requeue at once)",
		args: "[<id>]", minArgs: 0, maxArgs: 1,
		long: "Give the connection's ID from 'admin connections', or --session N for a dormant session (ID -).",
		flags: func(fs *flag.FlagSet) {
			fs.Uint64Var(&session, "session", 0, "the session to end (for a dormant session, which has no connection)")
		},
		action: func(r *run) error {
			body := map[string]uint64{}
			switch {
			case len(r.args) == 1 && r.isSet("session"):
				return &usageError{cmd: r.cmd, msg: "give a connection id or --session, not both"}
			case len(r.args) == 1:
				id, err := strconv.ParseUint(r.args[0], 10, 64)
				if err != nil || id == 0 {
					return &usageError{cmd: r.cmd, msg: fmt.Sprintf("%q is not a connection id (a positive number from 'admin connections')", r.args[0])}
				}
				body["id"] = id
			case r.isSet("session") && session > 0:
				body["session"] = session
			default:
				return &usageError{cmd: r.cmd, msg: "give the connection's id, or --session N (a positive session number) for a dormant session"}
			}
			var ans struct {
				Closed     bool   `json:"closed"`
				Connection uint64 `json:"connection"`
				WasDormant bool   `json:"was_dormant"`
			}
			raw, err := r.doJSON(http.MethodPost, "/admin/api/connections/close", nil, body, &ans)
			if err != nil {
				return err
			}
			if r.g.json.value {
				r.printJSON(raw)
				return nil
			}
			if ans.WasDormant {
				r.out("ended dormant session %d\n", session)
			} else {
				r.out("closed connection %d; its session ended\n", ans.Connection)
			}
			return nil
		},
	}
}
