package admin

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/transport/certs"
)

// settingsSource has runtime settings and users.
type settingsSource struct {
	runtimeSource
	names []string
}

func (f *settingsSource) Users() []string                      { return f.names }
func (f *settingsSource) PutUser(string, string) (bool, error) { return false, nil }
func (f *settingsSource) DeleteUser(string) error              { return nil }

// TestSettingsEventFamiliesAreTheirEndpoints: the runtime-settings,
// global-dlq, tls and users families carry, byte for byte, what their
// endpoints answer.
func TestSettingsEventFamiliesAreTheirEndpoints(t *testing.T) {
	m, err := certs.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := newServerWith(quietLogger(), &Options{TLS: certs.NewHolder(m)})
	src := &settingsSource{names: []string{"alice", "bob"}}
	src.state = node.RuntimeSettingsState{Version: 4, Settings: node.RuntimeSettings{LeaseMs: 700, ExpiryBatchMax: 3}, Locked: []string{"idle_queue_cleanup"}}
	src.dlq = node.GlobalDLQState{Version: 2, Target: &core.DLQTarget{Topic: "grave"}}
	s.Attach(src)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	families := []string{"runtime-settings", "global-dlq", "tls", "users"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/admin/api/events?families="+strings.Join(families, ","), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("events: %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	if line, _ := r.ReadString('\n'); !strings.HasPrefix(line, ": fibril events") {
		t.Fatalf("first line %q", line)
	}
	s.eventTick()
	got := map[string]string{}
	event := ""
	for len(got) < len(families) {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v (got %v)", err, got)
		}
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			event = strings.TrimSpace(name)
		} else if data, ok := strings.CutPrefix(line, "data: "); ok {
			got[event] = strings.TrimSpace(data)
		}
	}
	for _, f := range families {
		rec := do(t, s.Handler(), http.MethodGet, "/admin/api/"+f)
		if rec.Code != 200 {
			t.Fatalf("GET /admin/api/%s = %d %s", f, rec.Code, rec.Body)
		}
		if want := string(bytes.TrimSpace(rec.Body.Bytes())); got[f] != want {
			t.Errorf("family %s carries %s; the endpoint answers %s", f, got[f], want)
		}
	}
	if !strings.Contains(got["users"], `"alice"`) || !strings.Contains(got["global-dlq"], `"grave"`) || !strings.Contains(got["tls"], m.LeafFingerprintSHA256) {
		t.Fatalf("families %v", got)
	}
}
