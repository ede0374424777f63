// Package schemastest gives tests the event codec of the built-in catalog.
package schemastest

import (
	"sync"

	"github.com/proliferate/proliferate/schemas"
)

var codec = sync.OnceValue(func() *schemas.Codec {
	c, err := schemas.NewCodec()
	if err != nil {
		panic(err)
	}
	return c
})

// Codec is the codec of the built-in catalog, built once per test binary
// (it panics if the catalog does not load: every test would fail).
func Codec() *schemas.Codec { return codec() }
