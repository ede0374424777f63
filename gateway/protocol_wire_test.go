package gateway_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway"
	actinv "github.com/proliferate/proliferate/internal/actions/invocations"
)

// fill sets every field of v (a pointer) to a non-zero value, recursively,
// so a field added to the domain type and forgotten in its wire form shows.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"k":1}`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(7)
	}
}

// TestWireInvocationIsTheAPIsJSON: the action frames carry an invocation
// with exactly the JSON the actions API answers with.
func TestWireInvocationIsTheAPIsJSON(t *testing.T) {
	var inv actinv.Invocation
	fill(reflect.ValueOf(&inv).Elem())
	want, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(gateway.WireInvocation(inv))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("wire invocation\n got %s\nwant %s", got, want)
	}
	if g, _ := json.Marshal(gateway.WireInvocation(actinv.Invocation{})); !bytes.Equal(g, must(json.Marshal(actinv.Invocation{}))) {
		t.Fatalf("zero invocation: %s", g)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
