package schemas

import (
	"fmt"
	"maps"
	"slices"

	"github.com/linkedin/goavro/v2"
)

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

// SchemaFile describes one embedded schema version (documentation lists
// them with their fingerprints).
type SchemaFile struct {
	File      string // e.g. run.lifecycle.v2.avsc
	EventType string
	Version   int
	// Fingerprint is the CRC-64-AVRO of the schema's Parsing Canonical Form:
	// what single-object records written with it carry after C3 01
	// (little-endian), and what any Avro library computes from the file.
	Fingerprint uint64
	// LegacyFingerprint is the non-standard fingerprint (goavro's) that
	// releases before spec-conformant fingerprints wrote instead. The codec
	// still reads records carrying it, but never writes it.
	LegacyFingerprint uint64
}

// SchemaFiles lists every embedded schema version, by event type and
// version, without building a codec.
func SchemaFiles() ([]SchemaFile, error) {
	files, err := readSchemaFiles(schemaFiles)
	if err != nil {
		return nil, err
	}
	var out []SchemaFile
	for _, et := range slices.Sorted(maps.Keys(files)) {
		for _, f := range files[et] {
			fp, err := Fingerprint(f.text)
			if err != nil {
				return nil, fmt.Errorf("schemas: %s: %w", f.name, err)
			}
			codec, err := goavro.NewCodec(f.text)
			if err != nil {
				return nil, fmt.Errorf("schemas: %s: goavro: %w", f.name, err)
			}
			out = append(out, SchemaFile{File: f.name, EventType: et, Version: f.number, Fingerprint: fp, LegacyFingerprint: legacyFingerprint(codec)})
		}
	}
	return out, nil
}
