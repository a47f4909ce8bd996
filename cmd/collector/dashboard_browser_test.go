package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserDash is `collector serve` on a test database with a headless
// Chromium pointed at it, and the reads the dashboard tests make of pages.
type browserDash struct {
	t       *testing.T
	base    string // the collector's URL
	browser context.Context
	shots   string
}

// serveInBrowser starts `collector serve` on the database at url and a
// Chromium for it; both stop when the test ends.
func serveInBrowser(t *testing.T, url string) *browserDash {
	chromium := chromiumPath(t)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-listen", "127.0.0.1:0"}, env(url), pw, io.Discard)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("read listen address: %v", err)
	}
	go io.Copy(io.Discard, pr)
	d := &browserDash{t: t, base: strings.TrimSpace(strings.TrimPrefix(line, "collector listening on ")), shots: artifactsDir(t)}

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
	)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	browser, cancelTimeout := context.WithTimeout(browser, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelBrowser(); cancelAlloc() })
	d.browser = browser
	t.Logf("screenshots in %s", d.shots)
	return d
}

// ready waits until page has rendered its data.
func (d *browserDash) ready(page string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`main[data-page=%q][data-ready="true"]`, page)))
}

func (d *browserDash) text(sel string) string {
	d.t.Helper()
	s, err := chromedp.Run(d.browser, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		d.t.Fatalf("read %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

func (d *browserDash) number(sel string) float64 {
	d.t.Helper()
	s := d.text(sel)
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil {
		d.t.Fatalf("%s shows %q, not a number", sel, s)
	}
	return v
}

func (d *browserDash) attr(sel, name string) string {
	d.t.Helper()
	a, err := chromedp.Run(d.browser, chromedp.AttributeValue(chromedp.CSS(sel), name))
	if err != nil || !a.Exists {
		d.t.Fatalf("attribute %s of %s: %v (exists %v)", name, sel, err, a.Exists)
	}
	return a.Value
}

func (d *browserDash) count(sel string) int {
	d.t.Helper()
	n, err := chromedp.Run(d.browser, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
	if err != nil {
		d.t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

func (d *browserDash) shot(name string) {
	d.t.Helper()
	png, err := chromedp.Run(d.browser, chromedp.FullScreenshot(100))
	if err != nil {
		d.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(d.shots, name), png, 0o644); err != nil {
		d.t.Fatal(err)
	}
}

func (d *browserDash) noError() {
	d.t.Helper()
	if n := d.count(`[data-testid=error]`); n != 0 {
		d.t.Fatalf("the page shows an error (%d): %s", n, d.text("main"))
	}
}
