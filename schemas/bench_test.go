package schemas

import "testing"

// Benchmarks per event type. BenchmarkGoavro measures goavro alone on the
// native form of run.lifecycle, the baseline the codec's overhead (envelope
// checks, struct conversion, pre-validation, resolution) is relative to.

func BenchmarkEncode(b *testing.B) {
	c := newTestCodec(b)
	for _, e := range SampleEvents() {
		b.Run(e.EventType, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Encode(e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	c := newTestCodec(b)
	for _, e := range SampleEvents() {
		data, err := c.Encode(e)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(e.EventType, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := c.Decode(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkGoavro(b *testing.B) {
	c := newTestCodec(b)
	e := sampleOf(TypeRunLifecycle)
	ei := c.types[e.EventType]
	native, err := ei.enc.encode(e)
	if err != nil {
		b.Fatal(err)
	}
	avro := ei.newest().avro
	data, err := avro.BinaryFromNative(nil, native)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("BinaryFromNative/"+e.EventType, func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			if _, err := avro.BinaryFromNative(buf[:0], native); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("NativeFromBinary/"+e.EventType, func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, _, err := avro.NativeFromBinary(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
