package api

import (
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate/proliferate/internal/httpapi"
)

var ginParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// OpenAPIPath converts a Gin path (/repos/:id) to OpenAPI (/repos/{id}).
func OpenAPIPath(ginPath string) string { return ginParam.ReplaceAllString(ginPath, "{$1}") }

// OpenAPI builds the OpenAPI 3.1 document from the declared routes.
func (s *Server) OpenAPI() map[string]any {
	paths := map[string]map[string]any{}
	routes := s.Routes()
	sort.SliceStable(routes, func(i, j int) bool { return routes[i].Path < routes[j].Path })
	for _, r := range routes {
		p := Prefix + OpenAPIPath(r.Path)
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		op := map[string]any{
			"summary":     r.Summary,
			"description": "Access: " + r.Access.String() + ".",
			"operationId": operationID(r),
			"responses":   responses(r),
		}
		if r.Tag != "" {
			op["tags"] = []string{r.Tag}
		}
		if r.Access != Public {
			op["security"] = []map[string][]string{{"bearer": {}}}
		}
		var params []map[string]any
		for _, m := range ginParam.FindAllStringSubmatch(r.Path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, q := range r.Query {
			params = append(params, map[string]any{"name": q.Name, "in": "query", "required": q.Required,
				"description": q.Description, "schema": map[string]any{"type": "string"}})
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if r.Request != nil {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": Schema(reflect.TypeOf(r.Request))}}}
		}
		paths[p][strings.ToLower(r.Method)] = op
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "Proliferate API", "version": "1",
			"description": "Every error has the body {\"error\": {\"code\", \"message\", \"details\", \"request_id\"}}. Lists are paginated with ?limit= (≤100) and ?cursor=."},
		"servers": []map[string]any{{"url": "/"}},
		"paths":   paths,
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer",
				"description": "An access token from login, or an API key."}},
			"schemas": map[string]any{"Error": Schema(reflect.TypeFor[httpapi.ErrorBody]())},
		},
	}
}

func operationID(r Route) string {
	id := strings.ToLower(r.Method) + ginParam.ReplaceAllString(r.Path, "by_$1")
	return strings.NewReplacer("/", "_", "-", "_").Replace(id)
}

func responses(r Route) map[string]any {
	out := map[string]any{}
	ok := map[string]any{"description": http.StatusText(r.Status)}
	if r.Response != nil {
		ok["content"] = map[string]any{"application/json": map[string]any{"schema": Schema(reflect.TypeOf(r.Response))}}
	}
	out[strconv.Itoa(r.Status)] = ok
	out["default"] = map[string]any{"description": "error",
		"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/httpapi.Error"}}}}
	return out
}

// Schema reflects a Go type into a JSON Schema (2020-12, as OpenAPI 3.1 uses):
// json tags name properties, `binding:"required"` marks required fields, and
// min/max/oneof become length, item and enum constraints.
func Schema(t reflect.Type) map[string]any { return schemaOf(t, map[reflect.Type]bool{}) }

func schemaOf(t reflect.Type, seen map[reflect.Type]bool) map[string]any {
	if t.Kind() == reflect.Pointer {
		s := schemaOf(t.Elem(), seen)
		if typ, ok := s["type"].(string); ok {
			s["type"] = []string{typ, "null"}
		}
		return s
	}
	switch t {
	case reflect.TypeFor[time.Time]():
		return map[string]any{"type": "string", "format": "date-time"}
	case reflect.TypeFor[[]byte]():
		return map[string]any{"type": "string", "contentEncoding": "base64"}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), seen)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem(), seen)}
	case reflect.Interface:
		return map[string]any{}
	case reflect.Struct:
		if seen[t] {
			return map[string]any{"type": "object"} // recursive type: stop
		}
		seen[t] = true
		defer delete(seen, t)
		props := map[string]any{}
		var required []string
		addFields(t, props, &required, seen)
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			sort.Strings(required)
			s["required"] = required
		}
		return s
	default:
		return map[string]any{}
	}
}

func addFields(t reflect.Type, props map[string]any, required *[]string, seen map[reflect.Type]bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			addFields(f.Type, props, required, seen)
			continue
		}
		if name == "" {
			name = f.Name
		}
		s := schemaOf(f.Type, seen)
		for rule := range strings.SplitSeq(f.Tag.Get("binding"), ",") {
			key, arg, _ := strings.Cut(rule, "=")
			switch key {
			case "required":
				*required = append(*required, name)
			case "min", "max":
				n, err := strconv.Atoi(arg)
				if err != nil {
					continue
				}
				switch f.Type.Kind() {
				case reflect.String:
					s[key+"Length"] = n
				case reflect.Slice:
					s[key+"Items"] = n
				default:
					s[map[string]string{"min": "minimum", "max": "maximum"}[key]] = n
				}
			case "oneof":
				s["enum"] = strings.Fields(arg)
			case "email":
				s["format"] = "email"
			}
		}
		if f.Tag.Get("doc") != "" {
			s["description"] = f.Tag.Get("doc")
		}
		props[name] = s
	}
}
