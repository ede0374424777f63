package schemas

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to Decode: it must never panic (the
// recover in Decode would hide one, so a recovered panic fails too), and
// every failure must be classified as ErrCorrupt or ErrUnknownSchema. The
// seed corpus is every sample in both wire formats, damaged copies, and the
// records that crash goavro without the pre-validation (hostileRecords).
func FuzzDecode(f *testing.F) {
	soe := newTestCodec(f)
	_, cl := newFakeRegistry(f)
	conf := newTestCodec(f, WithRegistry(cl))
	for _, e := range SampleEvents() {
		for _, c := range []*Codec{soe, conf} {
			b, err := c.Encode(e)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
			f.Add(b[:len(b)/2])
			damaged := []byte(strings.Clone(string(b)))
			damaged[len(damaged)*2/3] ^= 0xff
			f.Add(damaged)
		}
	}
	_, hostile := hostileRecords(soe)
	for _, b := range hostile {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xC3, 0x01})
	f.Add([]byte{0x00, 0x00, 0x00, 0x00, 0x01})

	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(c *Codec) {
			e, err := c.Decode(b)
			if err != nil {
				if e != nil {
					t.Fatalf("Decode returned an event and an error: %v", err)
				}
				if strings.Contains(err.Error(), "decoder panicked") {
					t.Fatalf("Decode panicked: %v", err)
				}
				if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownSchema) {
					t.Fatalf("unclassified error: %v", err)
				}
				return
			}
			if e.Payload == nil || e.EventType != e.Payload.EventType() {
				t.Fatalf("decoded event is inconsistent: %+v", e)
			}
		}
		check(soe)
		// The registry codec too, but only for ids it already knows: an
		// unknown id would make every run an HTTP round trip.
		if len(b) >= 5 && b[0] == 0 {
			conf.reg.mu.RLock()
			_, known := conf.reg.byID[int(binary.BigEndian.Uint32(b[1:5]))]
			conf.reg.mu.RUnlock()
			if !known {
				return
			}
		}
		check(conf)
	})
}
