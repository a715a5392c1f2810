// Package dashboard is the broker's web dashboard (issue 13, SPEC 11
// "Pages"): HTML pages and their scripts and styles, embedded in the binary
// and served by the admin listener at / and /admin/<page>. Invariants:
//   - it serves files only: every number a page shows and every change it
//     makes goes through the admin JSON API (/admin/api/...) from the
//     browser, with the same auth as a script, so the dashboard can show
//     nothing and do nothing that the API cannot;
//   - nothing is fetched from elsewhere: no CDN, no web font, no build step;
//     the assets are plain files under assets/ (go:embed);
//   - pages are a layout template plus one content template and one script
//     per page; the page table below is the only list of pages (the nav,
//     the command palette and the tests read it);
//   - every answer carries a Content-Security-Policy that allows this
//     origin only and no inline script, so a message payload shown on a
//     page can never run as code.
package dashboard

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// Page is one page of the dashboard.
type Page struct {
	// Path is where it is served ("/" or "/admin/<name>").
	Path string
	// ID names its template (pages/<ID>.html) and script
	// (static/pages/<ID>.js).
	ID string
	// Title is the heading and the <title>; Nav groups the sidebar.
	Title, Nav string
	// Hidden pages (a queue's detail, the login) are not in the sidebar.
	Hidden bool
}

// Pages is every page, in sidebar order.
var Pages = []Page{
	{Path: "/", ID: "overview", Title: "Overview", Nav: "Broker"},
	{Path: "/admin/activity", ID: "activity", Title: "Activity", Nav: "Broker"},
	{Path: "/admin/topology", ID: "topology", Title: "Topology", Nav: "Broker"},
	{Path: "/admin/queues", ID: "queues", Title: "Queues", Nav: "Messaging"},
	{Path: "/admin/queue", ID: "queue", Title: "Queue", Nav: "Messaging", Hidden: true},
	{Path: "/admin/messages", ID: "messages", Title: "Messages", Nav: "Messaging"},
	{Path: "/admin/dlq", ID: "dlq", Title: "Dead letters", Nav: "Messaging"},
	{Path: "/admin/streams", ID: "streams", Title: "Streams", Nav: "Messaging"},
	{Path: "/admin/cohorts", ID: "cohorts", Title: "Consumer groups", Nav: "Messaging"},
	{Path: "/admin/connections", ID: "connections", Title: "Connections", Nav: "Clients"},
	{Path: "/admin/subscriptions", ID: "subscriptions", Title: "Subscriptions", Nav: "Clients"},
	{Path: "/admin/settings", ID: "settings", Title: "Settings", Nav: "Operate"},
	{Path: "/admin/security", ID: "security", Title: "Security", Nav: "Operate"},
	{Path: "/admin/diagnostics", ID: "diagnostics", Title: "Diagnostics", Nav: "Operate"},
	{Path: "/login", ID: "login", Title: "Log in", Hidden: true},
}

// Options say what the pages need to know of the listener.
type Options struct {
	// AuthEnabled shows the log-out button.
	AuthEnabled bool
	// Node names the broker in the header.
	Node string
}

// Handler serves the pages and the static assets.
type Handler struct {
	opts   Options
	pages  map[string]*template.Template // by Page.ID
	static map[string]staticFile         // by path under /static/
}

type staticFile struct {
	body        []byte
	gzipped     []byte // body gzipped once at start; nil when it would not shrink
	etag        string
	contentType string
}

// csp allows this origin only: no inline script or style, images from this
// origin and data: URLs (the favicon and charts are drawn as data URLs).
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// New parses the templates and loads the assets; an error is a broken
// build (a template that does not parse), never a runtime condition.
func New(opts Options) (*Handler, error) {
	h := &Handler{opts: opts, pages: map[string]*template.Template{}, static: map[string]staticFile{}}
	layout, err := fs.ReadFile(assets, "assets/layout.html")
	if err != nil {
		return nil, err
	}
	all := append(append([]Page(nil), Pages...), Page{ID: "notfound"})
	for _, p := range all {
		body, err := fs.ReadFile(assets, "assets/pages/"+p.ID+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard page %s: %w", p.ID, err)
		}
		t, err := template.New("layout").Parse(string(layout))
		if err == nil {
			_, err = t.Parse(string(body))
		}
		if err != nil {
			return nil, fmt.Errorf("dashboard page %s: %w", p.ID, err)
		}
		h.pages[p.ID] = t
	}
	// One compressor for every asset: a BestCompression writer allocates about
	// 1 MiB of tables, and one per asset left ~20 MiB of garbage in a fresh
	// broker's heap (and RSS).
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestCompression)
	err = fs.WalkDir(assets, "assets/static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(assets, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		h.static[strings.TrimPrefix(name, "assets/static/")] = staticFile{
			body: body, gzipped: gzipOf(zw, body), etag: `"` + hex.EncodeToString(sum[:8]) + `"`, contentType: ct}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Register adds the pages and /static/ to mux. The API's own routes are
// more specific (/admin/api/...), so they are never shadowed.
func (h *Handler) Register(mux *http.ServeMux) {
	for _, p := range Pages {
		page := p
		pattern := "GET " + p.Path
		if p.Path == "/" {
			pattern = "GET /{$}"
		}
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { h.servePage(w, r, page, http.StatusOK) })
	}
	mux.HandleFunc("GET /static/", h.serveStatic)
}

// pageData is what a page's templates see.
type pageData struct {
	Page        Page
	Nav         []navGroup
	AuthEnabled bool
	Node        string
}

type navGroup struct {
	Name  string
	Pages []Page
}

func (h *Handler) nav() []navGroup {
	var groups []navGroup
	for _, p := range Pages {
		if p.Hidden {
			continue
		}
		if len(groups) == 0 || groups[len(groups)-1].Name != p.Nav {
			groups = append(groups, navGroup{Name: p.Nav})
		}
		groups[len(groups)-1].Pages = append(groups[len(groups)-1].Pages, p)
	}
	return groups
}

func (h *Handler) servePage(w http.ResponseWriter, r *http.Request, p Page, status int) {
	t := h.pages[p.ID]
	var buf bytes.Buffer
	if err := t.Execute(&buf, pageData{Page: p, Nav: h.nav(), AuthEnabled: h.opts.AuthEnabled, Node: h.opts.Node}); err != nil {
		http.Error(w, "the dashboard page failed to render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	header := w.Header()
	header.Set("Content-Type", "text/html; charset=utf-8")
	header.Set("Cache-Control", "no-store")
	header.Set("Content-Security-Policy", csp)
	header.Set("X-Content-Type-Options", "nosniff")
	header.Set("Referrer-Policy", "same-origin")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// NotFound answers a browser's request for a page that does not exist with
// the dashboard's 404 page.
func (h *Handler) NotFound(w http.ResponseWriter, r *http.Request) {
	h.servePage(w, r, Page{Path: r.URL.Path, ID: "notfound", Title: "Not found", Hidden: true}, http.StatusNotFound)
}

// serveStatic serves an asset, revalidated by ETag on every load (no-cache)
// so that a new binary's assets are seen at once and an unchanged one costs
// a 304.
func (h *Handler) serveStatic(w http.ResponseWriter, r *http.Request) {
	f, ok := h.static[strings.TrimPrefix(r.URL.Path, "/static/")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	header := w.Header()
	header.Set("ETag", f.etag)
	header.Set("Cache-Control", "no-cache")
	header.Set("X-Content-Type-Options", "nosniff")
	if r.Header.Get("If-None-Match") == f.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	header.Set("Content-Type", f.contentType)
	header.Add("Vary", "Accept-Encoding")
	if f.gzipped != nil && acceptsGzip(r) {
		header.Set("Content-Encoding", "gzip")
		_, _ = w.Write(f.gzipped)
		return
	}
	_, _ = w.Write(f.body)
}

// gzipOf compresses an asset once, at start (they are embedded: the same
// bytes for the process's life) with zw, reset onto a fresh buffer; nil when
// it would not be smaller.
func gzipOf(zw *gzip.Writer, body []byte) []byte {
	var buf bytes.Buffer
	zw.Reset(&buf)
	_, _ = zw.Write(body)
	_ = zw.Close()
	if buf.Len() >= len(body) {
		return nil
	}
	return buf.Bytes()
}

// acceptsGzip says whether the request's Accept-Encoding allows gzip.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// WantsHTML says whether r is a browser asking for a page (not a script
// asking the API), for the 404 and the login redirect.
func WantsHTML(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if strings.HasPrefix(r.URL.Path, "/admin/api/") || r.URL.Path == "/metrics" {
		return false
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}
