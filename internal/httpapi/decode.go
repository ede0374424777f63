package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/gin-gonic/gin/binding"
	"github.com/go-playground/validator/v10"
)

// Validator lets a request type check what struct tags cannot express
// (cross-field rules). It runs after the tag validation passed.
type Validator interface {
	Validate() []FieldError
}

// DecodeJSON decodes body strictly into v: a body that is not JSON (empty,
// malformed, data after the value) is 400 bad_request; JSON of the wrong
// shape (an unknown field, a wrong type) and failed `binding` tags or
// Validate are 422 validation_failed with one detail per field.
func DecodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(v, err)
	}
	if dec.More() {
		return BadRequest("request body has data after the JSON value")
	}
	if err := binding.Validator.ValidateStruct(v); err != nil {
		var verrs validator.ValidationErrors
		if errors.As(err, &verrs) {
			return Invalid(fieldErrors(v, verrs)...)
		}
		return BadRequest(err.Error())
	}
	if val, ok := v.(Validator); ok {
		if fes := val.Validate(); len(fes) > 0 {
			return Invalid(fes...)
		}
	}
	return nil
}

func jsonError(v any, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return BadRequest("request body is empty; a JSON object is required")
	case errors.As(err, &syn):
		return BadRequest(fmt.Sprintf("malformed JSON at byte %d", syn.Offset))
	case errors.As(err, &typ):
		field := withoutEmbedded(v, typ.Field)
		if field == "" {
			field = "(body)"
		}
		return Invalid(FieldError{Field: field, Problem: "must be " + jsonTypeName(typ.Type)})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return Invalid(FieldError{Field: name, Problem: "unknown field"})
	default:
		return BadRequest("malformed JSON: " + err.Error())
	}
}

// withoutEmbedded drops from a decoder's field path the Go names of embedded
// structs (encoding/json names them; in JSON their fields are the parent's).
func withoutEmbedded(v any, path string) string {
	if path == "" {
		return ""
	}
	t := reflect.TypeOf(v)
	var out []string
	for _, seg := range strings.Split(path, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map) {
			t = t.Elem()
		}
		if t != nil && t.Kind() == reflect.Struct {
			if f, ok := t.FieldByName(seg); ok && f.Anonymous && f.Tag.Get("json") == "" {
				t = f.Type
				continue
			}
			var next reflect.Type
			for i := range t.NumField() {
				if strings.Split(t.Field(i).Tag.Get("json"), ",")[0] == seg {
					next = t.Field(i).Type
				}
			}
			t = next
		}
		out = append(out, seg)
	}
	return strings.Join(out, ".")
}

func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// fieldErrors names fields by their JSON names and rules in words.
func fieldErrors(v any, verrs validator.ValidationErrors) []FieldError {
	out := make([]FieldError, 0, len(verrs))
	for _, fe := range verrs {
		out = append(out, FieldError{Field: jsonPath(v, fe.StructNamespace()), Problem: problem(fe)})
	}
	return out
}

// jsonPath maps a Go namespace (Req.Items[0].Name) to JSON names (items[0].name).
func jsonPath(v any, ns string) string {
	t := reflect.TypeOf(v)
	parts := strings.Split(ns, ".")[1:]
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		name, idx, _ := strings.Cut(p, "[")
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		jsonName := name
		if t.Kind() == reflect.Struct {
			if f, ok := t.FieldByName(name); ok {
				tag := strings.Split(f.Tag.Get("json"), ",")[0]
				t = f.Type
				if f.Anonymous && tag == "" {
					continue // an embedded struct's fields are the parent's in JSON
				}
				if tag != "" {
					jsonName = tag
				}
			}
		}
		if idx != "" {
			jsonName += "[" + idx
		}
		out = append(out, jsonName)
	}
	return strings.Join(out, ".")
}

func problem(fe validator.FieldError) string {
	switch fe.Tag() {
	case "required":
		return "is required"
	case "max":
		if fe.Kind() == reflect.String {
			return "must be at most " + fe.Param() + " characters"
		}
		if fe.Kind() == reflect.Slice || fe.Kind() == reflect.Map {
			return "must have at most " + fe.Param() + " items"
		}
		return "must be at most " + fe.Param()
	case "min":
		if fe.Kind() == reflect.String {
			return "must be at least " + fe.Param() + " characters"
		}
		if fe.Kind() == reflect.Slice || fe.Kind() == reflect.Map {
			return "must have at least " + fe.Param() + " items"
		}
		return "must be at least " + fe.Param()
	case "email":
		return "must be an email address"
	case "oneof":
		return "must be one of " + strings.ReplaceAll(fe.Param(), " ", ", ")
	case "url", "http_url":
		return "must be a URL"
	case "uuid", "uuid4":
		return "must be a UUID"
	default:
		return "fails rule " + fe.Tag()
	}
}
