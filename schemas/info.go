package schemas

import "fmt"

// Content types of encoded values, carried in the content-type record header
// so a reader knows the framing before looking at the bytes.
const (
	ContentTypeSingleObject = "avro/single-object"
	ContentTypeConfluent    = "avro/confluent"
)

// ContentType is the framing this codec writes.
func (c *Codec) ContentType() string {
	if c.reg != nil {
		return ContentTypeConfluent
	}
	return ContentTypeSingleObject
}

// Latest returns the text and file name of the newest embedded schema of an
// event type, without building a codec (documentation uses it).
func Latest(eventType string) (text, file string, err error) {
	files, err := readSchemaFiles(schemaFiles)
	if err != nil {
		return "", "", err
	}
	vs := files[eventType]
	if len(vs) == 0 {
		return "", "", fmt.Errorf("schemas: no schema for event type %q", eventType)
	}
	newest := vs[len(vs)-1]
	return newest.text, newest.name, nil
}
