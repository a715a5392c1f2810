package dashboard

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func newMux(t *testing.T, opts Options) *http.ServeMux {
	t.Helper()
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Register(mux)
	mux.HandleFunc("/", h.NotFound)
	return mux
}

func get(mux http.Handler, path string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, req)
	return w
}

// Every page renders with its title, its own script, the nav (but the
// login page), a CSP, and no caching of the HTML.
func TestEveryPageRenders(t *testing.T) {
	mux := newMux(t, Options{Node: "node-a", AuthEnabled: true})
	for _, p := range Pages {
		w := get(mux, p.Path)
		body := w.Body.String()
		if w.Code != 200 {
			t.Fatalf("%s: %d", p.Path, w.Code)
		}
		if !strings.Contains(body, "<title>"+p.Title+" · Fibril</title>") {
			t.Errorf("%s: no title", p.Path)
		}
		if !strings.Contains(body, `src="/static/pages/`+p.ID+`.js"`) {
			t.Errorf("%s: not its script", p.Path)
		}
		if w.Header().Get("Content-Security-Policy") != csp || w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s: headers %v", p.Path, w.Header())
		}
		if p.ID != "login" && (!strings.Contains(body, `aria-current="page"`) != p.Hidden || !strings.Contains(body, `id="logout"`) || !strings.Contains(body, "node-a")) {
			t.Errorf("%s: nav, log-out or node name missing", p.Path)
		}
		if js := get(mux, "/static/pages/"+p.ID+".js"); js.Code != 200 || !strings.Contains(js.Header().Get("Content-Type"), "javascript") {
			t.Errorf("%s: script answers %d %s", p.Path, js.Code, js.Header().Get("Content-Type"))
		}
	}
	if body := get(mux, "/").Body.String(); strings.Contains(body, `id="logout"`) == false {
		t.Error("the log-out button is missing with auth on")
	}
	if body := get(newMux(t, Options{}), "/").Body.String(); strings.Contains(body, `id="logout"`) {
		t.Error("a log-out button with auth off")
	}
}

// A path that is no page is the dashboard's 404 page (status 404).
func TestNotFoundPage(t *testing.T) {
	mux := newMux(t, Options{})
	w := get(mux, "/admin/nope")
	if w.Code != 404 || !strings.Contains(w.Body.String(), "nf-path") {
		t.Fatalf("%d %s", w.Code, w.Body.String())
	}
	if get(mux, "/static/nope.js").Code != 404 {
		t.Fatal("a missing asset is not 404")
	}
}

// Assets are revalidated by ETag: a second load with the tag is a 304.
func TestStaticETag(t *testing.T) {
	mux := newMux(t, Options{})
	w := get(mux, "/static/dash.css")
	tag := w.Header().Get("ETag")
	if w.Code != 200 || tag == "" || w.Header().Get("Cache-Control") != "no-cache" || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/css") {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	if again := get(mux, "/static/dash.css", "If-None-Match", tag); again.Code != 304 || again.Body.Len() != 0 {
		t.Fatalf("revalidation %d", again.Code)
	}
}

// The assets keep the CSP's promises and fetch nothing from elsewhere: no
// inline script, no inline event handler or style attribute in the HTML,
// no absolute URL to another host in any asset, no innerHTML in scripts
// (data is put in the DOM as text).
func TestAssetsAreSelfContained(t *testing.T) {
	inlineScript := regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`)
	handlerAttr := regexp.MustCompile(`\son[a-z]+\s*=`)
	styleAttr := regexp.MustCompile(`\sstyle\s*=`)
	external := regexp.MustCompile(`(?:src|href|url\()\s*=?\s*["']?(?:https?:)?//`)
	err := fs.WalkDir(assets, "assets", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(assets, name)
		if err != nil {
			return err
		}
		s := string(b)
		if strings.HasSuffix(name, ".html") {
			if inlineScript.MatchString(s) || handlerAttr.MatchString(s) || styleAttr.MatchString(s) {
				t.Errorf("%s: inline script, handler or style attribute (the CSP refuses them)", name)
			}
		}
		if external.MatchString(s) {
			t.Errorf("%s: refers to another host: %s", name, external.FindString(s))
		}
		if strings.HasSuffix(name, ".js") && (strings.Contains(s, ".innerHTML") || strings.Contains(s, "insertAdjacentHTML") || strings.Contains(s, "document.write")) {
			t.Errorf("%s: builds markup from strings; use el() and textContent", name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// WantsHTML: a browser's GET of a page, not the API or a script.
func TestWantsHTML(t *testing.T) {
	cases := []struct {
		method, path, accept string
		want                 bool
	}{
		{"GET", "/admin/queues", "text/html,application/xhtml+xml", true},
		{"GET", "/admin/api/queues", "text/html", false},
		{"GET", "/metrics", "text/html", false},
		{"GET", "/admin/queues", "application/json", false},
		{"POST", "/admin/queues", "text/html", false},
	}
	for _, c := range cases {
		req := httptest.NewRequest(c.method, c.path, nil)
		req.Header.Set("Accept", c.accept)
		if got := WantsHTML(req); got != c.want {
			t.Errorf("%s %s %s: %v", c.method, c.path, c.accept, got)
		}
	}
}

// Assets go gzipped to a browser that takes it, byte for byte the file once
// inflated, and plain to one that does not.
func TestStaticGzip(t *testing.T) {
	mux := newMux(t, Options{})
	plain := get(mux, "/static/dash.js")
	zipped := get(mux, "/static/dash.js", "Accept-Encoding", "gzip, deflate, br")
	if plain.Header().Get("Content-Encoding") != "" || zipped.Header().Get("Content-Encoding") != "gzip" || zipped.Body.Len()*2 > plain.Body.Len() {
		t.Fatalf("plain %d %v, gzipped %d %v", plain.Body.Len(), plain.Header(), zipped.Body.Len(), zipped.Header())
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	inflated, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(inflated, plain.Body.Bytes()) {
		t.Fatalf("inflated %d bytes, err %v", len(inflated), err)
	}
	if refused := get(mux, "/static/dash.js", "Accept-Encoding", "gzip;q=0"); refused.Header().Get("Content-Encoding") != "" {
		t.Fatal("gzip sent to a client that refused it")
	}
}
