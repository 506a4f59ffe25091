package framework

import (
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// page is a white picture of the browser's window with the boxes filled in their colours.
func page(width, height int, boxes map[image.Rectangle]color.Color) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	for r, c := range boxes {
		draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
	}
	return img
}

func TestCheckScreenshot(t *testing.T) {
	blue := color.RGBA{0x3a, 0x7b, 0xd5, 0xff}
	grey := color.RGBA{0xf3, 0xf3, 0xf3, 0xff}
	bar := func(x, width int) image.Rectangle { return image.Rect(x, 100, x+width, 114) }
	tests := []struct {
		name    string
		img     image.Image
		notPNG  bool
		wantErr string
	}{
		{name: "waterfall", img: page(shotWidth, shotHeight, map[image.Rectangle]color.Color{
			image.Rect(300, 100, 850, 114): grey, bar(320, 40): blue, image.Rect(360, 130, 420, 144): blue})},
		{name: "blank", img: page(shotWidth, shotHeight, nil), wantErr: "blank"},
		{name: "grey lanes alone", img: page(shotWidth, shotHeight, map[image.Rectangle]color.Color{image.Rect(300, 100, 850, 114): grey}), wantErr: "blank"},
		{name: "bars of their minimum width", img: page(shotWidth, shotHeight, map[image.Rectangle]color.Color{
			bar(300, 2): blue, bar(400, 2): blue, bar(500, 2): blue}), wantErr: "blank"},
		{name: "a bar too short", img: page(shotWidth, shotHeight, map[image.Rectangle]color.Color{bar(300, 20): blue}), wantErr: "blank"},
		{name: "not the window's size", img: page(800, 600, map[image.Rectangle]color.Color{bar(300, 200): blue}), wantErr: "800x600 pixels"},
		{name: "not a PNG", notPNG: true, wantErr: "decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "shot.png")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			if tt.notPNG {
				_, err = f.WriteString("<html>")
			} else {
				err = png.Encode(f, tt.img)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			err = checkScreenshot(path)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("checkScreenshot = %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}
