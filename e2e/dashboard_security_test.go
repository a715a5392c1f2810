package e2e

// The dashboard's Security page and the login flow, in
// headless Chromium against a real `fibril serve` (dashboard_harness_test.go).
// Every change is made through the page (fill, click, confirm) and checked
// through the API, or through the wire protocol when it is about logins.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/security"
	"github.com/chromedp/chromedp"

	"github.com/fibril-go/fibril/transport/certs"
)

// TestDashboardSecurityUsers: users are added, given a new password and
// removed through the page (the removal after a confirmation), and a wire
// client's AUTH follows each step: the new user logs in, the old password
// stops working, the removed user is refused; while a password is changed
// the name is read-only (no user is added by typing there), Cancel goes
// back to adding, and a user removed elsewhere ends the change; a bad name
// shows the API's message and the refused password is not kept; the
// certificate shown is the API's, served on QUIC but not TCP
// (no --tcp-tls); admin auth is shown off.
func TestDashboardSecurityUsers(t *testing.T) {
	s, a, p := startDashboard(t)
	var info struct {
		Fingerprint string `json:"fingerprint_sha256"`
	}
	a.json("GET", "/admin/api/tls", "", 200, &info)
	p.open("/admin/security")
	p.waitText("#live", "live")
	p.waitText("#sec-fingerprint", info.Fingerprint)
	p.waitText("#sec-served", "TCP without TLS")
	p.waitText("#sec-auth", "off")
	p.waitText("#sec-auth-badge", "auth off")
	p.waitText("#sec-users", "No user yet")
	p.waitText("#sec-default-login", "fibril / fibril")

	fillIn(p, "#sec-user-name", "alice")
	fillIn(p, "#sec-user-password", "first-pw")
	p.click("#sec-user-save")
	p.waitText("#sec-user-status", "Added user alice")
	p.waitJS("alice is listed", `!!document.querySelector('#users-table tr[data-key="alice"]')`)
	p.waitJS("the password field is emptied", `document.getElementById('sec-user-password').value === ''`)
	if status, body := a.do("GET", "/admin/api/users", ""); status != 200 || !strings.Contains(body, `"alice"`) {
		t.Fatalf("users after the page added alice: %d %s", status, body)
	}
	if err := dialAs(s, "alice", "first-pw"); err != nil {
		t.Fatalf("alice added through the page cannot AUTH: %v", err)
	}

	p.jsClick(`#users-table tr[data-key="alice"] button[data-action="password"]`)
	p.waitJS("the form is set to change alice's password", `document.getElementById('sec-user-name').value === 'alice' &&
		document.getElementById('sec-user-save').textContent === 'Change password' && document.activeElement.id === 'sec-user-password'`)
	// Changing a password never adds a user: the name is read-only then
	// (what a person types into it is dropped).
	var readOnly bool
	p.eval(`document.getElementById('sec-user-name').readOnly`, &readOnly)
	if !readOnly {
		t.Errorf("the name stays editable while changing alice's password")
	}
	p.run("type into the name", chromedp.SendKeys("#sec-user-name", "x", chromedp.ByQuery))
	fillIn(p, "#sec-user-password", "second-pw")
	p.click("#sec-user-save")
	p.waitJS("the change is answered", `document.getElementById('sec-user-status').textContent !== ''`)
	if status, body := a.do("GET", "/admin/api/users", ""); status != 200 || strings.Contains(body, `"alicex"`) {
		t.Errorf("changing alice's password added a user: %d %s", status, body)
	}
	p.waitText("#sec-user-status", "Changed the password of alice")
	if err := dialAs(s, "alice", "first-pw"); err == nil {
		t.Fatal("alice's old password still works after the page changed it")
	}
	if err := dialAs(s, "alice", "second-pw"); err != nil {
		t.Fatalf("alice's new password: %v", err)
	}

	// Back to adding: Cancel leaves the password mode, the name editable.
	p.jsClick(`#users-table tr[data-key="alice"] button[data-action="password"]`)
	p.waitText("#sec-user-save", "Change password")
	p.click("#sec-user-cancel")
	p.waitJS("the form adds users again", `document.getElementById('sec-user-save').textContent === 'Add user' &&
		!document.getElementById('sec-user-name').readOnly && document.getElementById('sec-user-name').value === '' &&
		document.getElementById('sec-user-cancel').hidden`)

	fillIn(p, "#sec-user-name", "has space")
	fillIn(p, "#sec-user-password", "x")
	p.click("#sec-user-save")
	p.waitText("#sec-user-status", "bad_name")
	// No password is kept, a refused one either.
	var pw string
	p.eval(`document.getElementById('sec-user-password').value`, &pw)
	if pw != "" {
		t.Errorf("the password field still holds %q after the API refused it", pw)
	}

	// The user whose password is being changed is removed elsewhere: the
	// form goes back to adding (a "change" would add it back).
	a.json("POST", "/admin/api/users", `{"name":"bob","password":"bob-pw"}`, 200, nil)
	p.waitJS("bob is listed", `!!document.querySelector('#users-table tr[data-key="bob"]')`)
	p.jsClick(`#users-table tr[data-key="bob"] button[data-action="password"]`)
	p.waitText("#sec-user-hint", "Changing the password of bob")
	a.json("DELETE", "/admin/api/users/bob", "", 200, nil)
	p.waitText("#sec-user-status", "User bob was removed elsewhere; its password was not changed.")
	p.waitJS("the form adds users again", `document.getElementById('sec-user-save').textContent === 'Add user' && !document.getElementById('sec-user-name').readOnly`)

	p.shots("security")
	p.axe()
	p.keyboardReach()

	p.jsClick(`#users-table tr[data-key="alice"] button[data-action="remove"]`)
	p.waitText("#confirm-text", "Remove user alice?")
	p.acceptConfirm()
	p.waitJS("alice is gone", `!document.querySelector('#users-table tr[data-key="alice"]')`)
	if status, body := a.do("GET", "/admin/api/users", ""); status != 200 || strings.Contains(body, `"alice"`) {
		t.Fatalf("users after the page removed alice: %d %s", status, body)
	}
	if err := dialAs(s, "alice", "second-pw"); err == nil {
		t.Fatal("alice still logs in after the page removed her")
	}
	p.noErrors(400)
	p.measure("security", "/admin/security")
}

// mintLeafFor writes a server certificate signed by the data directory's
// CA, valid for validity from now, over the leaf the broker reads on a
// reload; it answers its fingerprint.
func mintLeafFor(t *testing.T, tlsDir string, validity time.Duration) string {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(tlsDir, certs.CACertFileName))
	if err != nil {
		t.Fatal(err)
	}
	caKeyPEM, err := os.ReadFile(filepath.Join(tlsDir, certs.CAKeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(caKeyPEM)
	if cb == nil || kb == nil {
		t.Fatal("the CA files do not hold PEM")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 100))
	tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "fibril-broker-short", Organization: []string{"Fibril"}},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(validity), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	if err := os.WriteFile(filepath.Join(tlsDir, certs.LeafKeyName), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tlsDir, certs.LeafFileName), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return certs.FingerprintSHA256(der)
}

// TestDashboardSecurityTLSReload: a broker with --tcp-tls serves the
// dashboard over HTTPS; the Security page shows the API's certificate
// (fingerprint, SANs, days left) served on TCP, QUIC and the admin
// listener; a reload of broken material through the page shows the API's
// refusal and the old fingerprint stays; a reload of a new leaf (valid for
// ten days) shows the new fingerprint, the one the wire listener presents,
// and the expiry warning.
func TestDashboardSecurityTLSReload(t *testing.T) {
	needBrowser(t)
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	dataDir := t.TempDir()
	s := startServer(t, dataDir, "--admin-listen", adminAddr, "--tcp-tls")
	caPEM, err := os.ReadFile(filepath.Join(dataDir, certs.TLSDirName, certs.CACertFileName))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	a := newAdminClient(t, "https://"+adminAddr)
	a.hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	eventually(t, 5000, 20, func() bool { status, _ := a.do("GET", "/readyz", ""); return status == 200 })
	p := openBrowser(t, a.base)
	// The broker's CA is not the browser's: this tab accepts it (the CA's
	// own trust is TestSurfaceTLSReload's).
	p.run("accept the broker's certificate", security.SetIgnoreCertificateErrors(true))
	t.Cleanup(func() { _ = chromedp.Run(p.ctx, security.SetIgnoreCertificateErrors(false)) })

	type tlsState struct {
		Fingerprint string `json:"fingerprint_sha256"`
		SANs        []string
		NotAfter    string `json:"not_after"`
		AdminHTTPS  bool   `json:"admin_https"`
	}
	var info tlsState
	var notAfter time.Time
	a.json("GET", "/admin/api/tls", "", 200, &info)
	if !info.AdminHTTPS {
		t.Fatalf("the admin listener is not HTTPS: %+v", info)
	}
	old := info.Fingerprint
	p.open("/admin/security")
	p.waitText("#live", "live")
	p.waitText("#sec-fingerprint", old)
	p.waitText("#sec-served", "TCP with TLS")
	p.waitText("#sec-served", "this admin listener over HTTPS")
	for _, san := range info.SANs {
		p.waitText("#sec-sans", san)
	}
	notAfter, err = time.Parse(time.RFC3339, info.NotAfter)
	if err != nil {
		t.Fatal(err)
	}
	left := int(time.Until(notAfter) / (24 * time.Hour))
	days := strconv.Itoa(left)
	if left >= 1000 {
		days = strconv.Itoa(left/1000) + "," + fmt.Sprintf("%03d", left%1000)
	}
	p.waitText("#sec-days-left", days+" days left")
	p.waitText("#sec-cert-badge", "valid")

	// Broken material: refused, the old certificate keeps serving.
	tlsDir := filepath.Join(dataDir, certs.TLSDirName)
	leafPath := filepath.Join(tlsDir, certs.LeafFileName)
	goodLeaf, _ := os.ReadFile(leafPath)
	if err := os.WriteFile(leafPath, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.click("#sec-reload")
	p.waitText("#sec-reload-status", "Refused: bad_certificate: the certificate material in")
	p.waitText("#sec-fingerprint", old)
	if leafOf(t, s.addr()) != old {
		t.Fatal("a refused reload changed the served certificate")
	}
	os.WriteFile(leafPath, goodLeaf, 0o644)

	// A new leaf, ten days long.
	fresh := mintLeafFor(t, tlsDir, 10*24*time.Hour+time.Hour)
	p.click("#sec-reload")
	p.waitText("#sec-reload-status", "Reloaded: new handshakes (TCP, QUIC, admin HTTPS) get "+fresh)
	p.waitText("#sec-reload-status", "it replaced "+old)
	p.waitText("#sec-fingerprint", fresh)
	a.json("GET", "/admin/api/tls", "", 200, &info)
	if info.Fingerprint != fresh {
		t.Fatalf("the API says %s after the page's reload, want %s", info.Fingerprint, fresh)
	}
	if got := leafOf(t, s.addr()); got != fresh {
		t.Fatalf("TCP-TLS presents %s after the page's reload, want %s", got, fresh)
	}
	p.waitText("#sec-cert-badge", "expires in 10 days")
	p.waitText("#sec-expiry-warning", "expires in 10 days: put a new server.pem and server.key in "+dataDir)
	p.waitJS("the badge is a warning", `document.getElementById('sec-cert-badge').classList.contains('warning')`)
	p.shots("security-tls-expiring")
	p.axe()
	p.noErrors(400)
}

// loginReady waits for the login page's script to have started (it
// focuses the username): a submit before it would be the browser's own.
func loginReady(p *dashPage) {
	p.t.Helper()
	p.waitJS("the login page's script runs", `location.pathname === '/login' && document.activeElement && document.activeElement.id === 'login-username'`)
}

// TestDashboardLogin: with admin auth on, opening a page without a session
// goes to the login page with the page as next; a wrong password shows the
// API's message and stays; the right one returns to the page (its query
// kept), which then reads the API with the session cookie; the Security
// page says auth is on; Log out ends the session (the old cookie is
// refused by the API) and a page goes back to the login; past the rate
// limit the page shows the 429's wait and keeps its button off.
func TestDashboardLogin(t *testing.T) {
	_, a, p := startDashboard(t, "--admin-auth", "--admin-username", "ops", "--admin-password", "hunter2")
	// The browser's cookies are per host, not per port: leave none behind
	// for the next test's broker on 127.0.0.1.
	t.Cleanup(func() { _ = chromedp.Run(p.ctx, network.ClearBrowserCookies()) })

	p.open("/admin/settings?cfg.q=tls")
	p.waitJS("the login page with next", `location.pathname === '/login' && new URLSearchParams(location.search).get('next') === '/admin/settings?cfg.q=tls'`)
	p.waitText("#login-why", "/admin/settings?cfg.q=tls")
	loginReady(p)

	fillIn(p, "#login-username", "ops")
	fillIn(p, "#login-password", "wrong")
	p.click("#login-submit")
	p.waitText("#login-status", "Wrong username or password.")
	p.waitJS("still on the login page, password emptied", `location.pathname === '/login' && document.getElementById('login-password').value === ''`)
	p.shots("login")
	p.axe()
	p.keyboardReach()

	fillIn(p, "#login-password", "hunter2")
	p.click("#login-submit")
	p.waitJS("back on the page", `location.pathname === '/admin/settings' && location.search === '?cfg.q=tls'`)
	p.waitText("#st-version", "version")
	p.waitJS("the filter of the URL is kept", `document.getElementById('cfg-filter') && document.getElementById('cfg-filter').value === 'tls'`)
	var cookies []*network.Cookie
	p.run("cookies", chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		cookies, err = network.GetCookies().Do(ctx)
		return err
	}))
	session := ""
	for _, c := range cookies {
		if c.Name == "fibril_admin_session" {
			session = c.Value
			if !c.HTTPOnly {
				t.Fatal("the session cookie is readable by scripts")
			}
		}
	}
	if session == "" {
		t.Fatalf("no session cookie after the login: %v", cookies)
	}
	withCookie := func() int {
		req, _ := http.NewRequest("GET", a.base+"/admin/api/overview", nil)
		req.AddCookie(&http.Cookie{Name: "fibril_admin_session", Value: session})
		resp, err := a.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := withCookie(); got != 200 {
		t.Fatalf("the page's session cookie: %d", got)
	}
	p.open("/admin/security")
	p.waitText("#sec-auth", "on, as ops (--admin-username)")
	p.waitText("#sec-auth-badge", "auth on")

	p.click("#logout")
	p.waitJS("the login page after log out", `location.pathname === '/login'`)
	if got := withCookie(); got != 401 {
		t.Fatalf("the session still works after Log out: %d", got)
	}
	p.open("/admin/security")
	p.waitJS("a page needs the login again", `location.pathname === '/login' && new URLSearchParams(location.search).get('next') === '/admin/security'`)

	// next is followed only to a path on this origin.
	for _, evil := range []string{"//evil.example/x", "https://evil.example/", "/\\evil.example/"} {
		p.open("/login?next=" + url.QueryEscape(evil))
		loginReady(p)
		fillIn(p, "#login-username", "ops")
		fillIn(p, "#login-password", "hunter2")
		p.click("#login-submit")
		p.waitJS("next "+evil+" is not followed", fmt.Sprintf(`location.origin === %q && location.pathname === '/'`, a.base))
		p.waitText("#live", "live") // the page's script is running: Log out is wired
		p.click("#logout")
		p.waitJS("logged out", `location.pathname === '/login'`)
	}

	// The rate limit: one failure so far (the page's); nine more from a
	// script at the same address make ten, and then even the right
	// password is answered 429.
	a.user, a.pass = "ops", "nope"
	for range 9 {
		a.problem("GET", "/admin/api/overview", "", 401, "unauthorized")
	}
	loginReady(p)
	fillIn(p, "#login-username", "ops")
	fillIn(p, "#login-password", "hunter2")
	p.click("#login-submit")
	p.waitText("#login-status", "Too many failed logins from this address; wait")
	p.waitJS("the button waits", `document.getElementById('login-submit').disabled && /^Wait \d+ s$/.test(document.getElementById('login-submit').textContent)`)
	p.waitJS("still on the login page", `location.pathname === '/login'`)
	p.noErrors(401, 429)
	p.measure("login", "/login")
}
