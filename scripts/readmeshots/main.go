// Command readmeshots makes the README's screenshots from the browser
// tests' artifacts (`make screenshots`): the first 1280×800 of each named
// full-page screenshot (what the screen shows in a laptop's window),
// re-encoded with the best PNG compression; optipng, when installed,
// shrinks them further afterwards.
//
//	go run ./scripts/readmeshots -from bench/screenshots -to docs/screenshots sessions-list inbox …
package main

import (
	"flag"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"os"
	"path/filepath"
)

func main() {
	from := flag.String("from", "bench/screenshots", "directory of the browser tests' screenshots")
	to := flag.String("to", "docs/screenshots", "directory of the README's screenshots")
	w := flag.Int("width", 1280, "width of the README's screenshots")
	h := flag.Int("height", 800, "height of the README's screenshots (longer pages are cut)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "readmeshots: name the screenshots (without .png)")
		os.Exit(2)
	}
	if err := os.MkdirAll(*to, 0o755); err != nil {
		fatal(err)
	}
	for _, name := range flag.Args() {
		if err := crop(filepath.Join(*from, name+".png"), filepath.Join(*to, name+".png"), *w, *h); err != nil {
			fatal(err)
		}
	}
}

func crop(src, dst string, w, h int) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	r := img.Bounds()
	r.Max.X, r.Max.Y = min(r.Max.X, r.Min.X+w), min(r.Max.Y, r.Min.Y+h)
	out := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	draw.Draw(out, out.Bounds(), img, r.Min, draw.Src)
	o, err := os.Create(dst)
	if err != nil {
		return err
	}
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(o, out); err != nil {
		o.Close()
		return err
	}
	if err := o.Close(); err != nil {
		return err
	}
	st, _ := os.Stat(dst)
	fmt.Printf("%s: %dx%d, %d kB\n", dst, r.Dx(), r.Dy(), st.Size()/1000)
	return nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "readmeshots:", err)
	os.Exit(1)
}
