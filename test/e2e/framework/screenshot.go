package framework

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// browserPackages are what a screenshot needs, each by a file it installs: Debian's
// chromium, and a font for the page's text. Chromium is big and only a test that takes a
// screenshot needs it, so the harness does not install it up front.
var browserPackages = map[string]string{
	"chromium":          browser,
	"fonts-dejavu-core": "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
}

const (
	browser = "/usr/bin/chromium"
	// The browser's window, and so the screenshot's size.
	shotWidth, shotHeight = 1200, 800
	// minColouredArea is how many pixels inside areas of colour (colouredArea) a
	// screenshot must hold. The timeline's bars of 14 pixels high hold 12 a column; at this
	// size the bars of a whole start fill a lane of 550 pixels, and 300 is what bars across
	// a twentieth of it hold. A blank page holds none, nor does a page of text, even red,
	// or of bars that lost their CSS widths and keep their 2-pixel minimum.
	minColouredArea = 300
	// shotTimeout bounds the browser's run: a page of ours renders in seconds.
	shotTimeout = 2 * time.Minute
)

// Screenshot renders the HTML file at htmlPath in a headless chromium (installed on
// first use), checks that the picture is the window's size and not blank, and keeps it
// among the test's artefacts (Artefact) as <test>-<page>.png. It returns the PNG's path.
func Screenshot(t *testing.T, htmlPath string) string {
	t.Helper()
	start := time.Now()
	if err := Cluster(t).EnsureExtraPackages(Context(t, 10*time.Minute), browserPackages); err != nil {
		t.Fatalf("install the browser: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("installed chromium in %s", d.Round(time.Second))
	}
	pngPath := Artefact(t, strings.TrimSuffix(filepath.Base(htmlPath), filepath.Ext(htmlPath))+".png")
	start = time.Now()
	if err := screenshot(context.Background(), htmlPath, pngPath, t.TempDir()); err != nil {
		t.Fatalf("screenshot of %s: %v", htmlPath, err)
	}
	if err := checkScreenshot(pngPath); err != nil {
		t.Fatalf("screenshot of %s at %s: %v", htmlPath, pngPath, err)
	}
	t.Logf("screenshot of %s in %s: %s", filepath.Base(htmlPath), time.Since(start).Round(time.Millisecond), pngPath)
	return pngPath
}

// screenshot has chromium draw the page at htmlPath into pngPath, within shotTimeout;
// scratch, an empty directory, holds the browser's fresh profile and its output.
func screenshot(ctx context.Context, htmlPath, pngPath, scratch string) error {
	htmlPath, err := filepath.Abs(htmlPath)
	if err != nil {
		return err
	}
	// For a file that is not there the browser writes no screenshot and exits 0.
	if _, err := os.Stat(htmlPath); err != nil {
		return err
	}
	if err := os.Remove(pngPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err // a stale picture would pass for the new one
	}
	// The output to a file, not a pipe: a helper process of the browser that outlives it
	// would hold a pipe open and keep Wait waiting.
	logPath := filepath.Join(scratch, "chromium.log")
	output, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer output.Close()
	ctx, cancel := context.WithTimeout(ctx, shotTimeout)
	defer cancel()
	// No sandbox: it needs a user other than root. Nothing is fetched from the network.
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(scratch, "profile"), fmt.Sprintf("--window-size=%d,%d", shotWidth, shotHeight),
		"--screenshot="+pngPath, "file://"+htmlPath)
	cmd.Stdout, cmd.Stderr = output, output
	// The browser and its helper processes in a group of their own, which goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // ESRCH when nothing is left
	}
	out, _ := os.ReadFile(logPath)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return fmt.Errorf("%s: %w\n%s", browser, err, tail(out, 3000))
	}
	if _, err := os.Stat(pngPath); err != nil {
		return fmt.Errorf("%s wrote no screenshot: %w\n%s", browser, err, tail(out, 3000))
	}
	return nil
}

// checkScreenshot checks that the PNG at path is a picture of the browser's window with
// something drawn in colour on it.
func checkScreenshot(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if size := img.Bounds().Size(); size != image.Pt(shotWidth, shotHeight) {
		return fmt.Errorf("%dx%d pixels, want the window's %dx%d", size.X, size.Y, shotWidth, shotHeight)
	}
	if n := colouredArea(img); n < minColouredArea {
		return fmt.Errorf("blank: %d pixels in areas of colour, want at least %d", n, minColouredArea)
	}
	return nil
}

// colouredArea counts the pixels of img inside areas of one colour, such as a bar: those in
// colour (channels that differ by more than a fifth of their range: not white, grey or
// black) whose eight neighbours have the same colour. Text in a colour has strokes too
// thin and anti-aliased to count.
func colouredArea(img image.Image) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y + 1; y < b.Max.Y-1; y++ {
		for x := b.Min.X + 1; x < b.Max.X-1; x++ {
			if c := img.At(x, y); isColour(c) && sameAround(img, x, y, c) {
				n++
			}
		}
	}
	return n
}

func isColour(c color.Color) bool {
	r, g, b, _ := c.RGBA()
	return max(r, g, b)-min(r, g, b) > 0xffff/5
}

// sameAround tells whether the eight neighbours of (x, y) have the colour c.
func sameAround(img image.Image, x, y int, c color.Color) bool {
	r, g, b, a := c.RGBA()
	for dy := -1; dy <= 1; dy++ {
		for dx := -1; dx <= 1; dx++ {
			if r2, g2, b2, a2 := img.At(x+dx, y+dy).RGBA(); r2 != r || g2 != g || b2 != b || a2 != a {
				return false
			}
		}
	}
	return true
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
