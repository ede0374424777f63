// Package schemas defines the Avro schemas of every event on Proliferate's
// Kafka topics, their Go types, and the codec that writes and reads them.
//
// # Schemas
//
// Each event type has one schema file per version, avro/<event_type>.v<N>.avsc,
// embedded in the binary. Analytics teams read the topics with any Kafka
// client and any Avro library given these files. Every schema is a record
// named com.proliferate.events.<PascalName> (see RecordName) carrying an
// "event_type" attribute equal to its file name, and starts with the same
// envelope fields:
//
//	event_id        string (UUID)   unique id; consumers deduplicate on it
//	event_type      string          e.g. "run.lifecycle"; also the event_type record header
//	occurred_at     timestamp-millis when it happened
//	org_id          string          owning organization, "" when none
//	trace_id        string          W3C trace id, default ""
//	correlation_id  string          ties together events of one stimulus, default ""
//	payload         record          <PascalName>Payload, specific to the type
//
// In Go an Event is the Envelope plus a Payload, one struct per event type
// (RunLifecycle, WebhookReceived, ...), bound to the newest schema field by
// field through avro struct tags: ["null", T] ↔ *T, array ↔ slice,
// map ↔ map[string]T, bytes ↔ []byte, enum ↔ string, int ↔ int32,
// long ↔ int64, timestamp-millis ↔ time.Time. Money is never a float: LLM
// cost is int64 micro-dollars and credits are int64 millionths of a credit,
// exact and readable by every Avro library. Every enum has the symbol
// "unknown" as its Avro default, so symbols can be added later without
// breaking readers that still use an older schema.
//
// # Wire formats
//
// By default the codec writes Avro single-object encoding: the magic bytes
// C3 01, the 8-byte little-endian CRC-64-AVRO (Rabin) fingerprint of the
// writer schema's Parsing Canonical Form (CanonicalForm, Fingerprint; both
// exactly as the Avro specification defines them), then the Avro binary
// body. Any Avro library can decode it from the .avsc files alone; the tests
// check that with the npm library avsc. Releases before that wrote goavro's
// non-standard fingerprint instead (its "canonical form" keeps logical types
// as {"type":"long"}); Decode still accepts those legacy fingerprints, so
// records already on topics stay readable, and Encode never writes them.
//
// With WithRegistry (when SCHEMA_REGISTRY_URL is set) it writes the Confluent
// wire format: a 0x00 byte, the 4-byte big-endian schema id, then the body.
// NewCodec registers the newest version of each schema; unknown ids met while
// decoding are fetched from the registry, cached, and mapped to a known
// version by fingerprint. Subjects use the record name strategy (the subject
// is the full record name, e.g. com.proliferate.events.RunLifecycle), not the
// topic name strategy, because a topic may carry several event types (every
// dead-letter topic does) and each type evolves on its own.
//
// A codec with a registry decodes both formats, so a topic can move from
// single-object to Confluent framing without stopping its consumers; a codec
// without one reports Confluent records as ErrUnknownSchema. Decode never panics;
// its errors wrap ErrCorrupt (bad bytes) or ErrUnknownSchema (a schema this
// binary does not know), both worth dead-lettering, or else are registry
// failures worth retrying. Before goavro sees a body, Decode checks its
// structure against the writer schema, because goavro pre-allocates for any
// block count up to 2^31 and a few hostile bytes would crash the process.
//
// # Evolution
//
// Schemas evolve backward compatibly: a consumer built with the newest
// schemas reads everything ever written. Decode resolves data written with
// an older version into the current Go type by field name: fields the writer
// lacked get the reader's default, fields the reader dropped are skipped,
// and int→long→float→double and string↔bytes are promoted. To change a
// schema:
//
//  1. Copy avro/<type>.v<N>.avsc to avro/<type>.v<N+1>.avsc; never edit a
//     released version, and keep every old version (old data needs it).
//  2. In the new file, add fields with a default (["null", T] with default
//     null for optional values). Never rename or remove a field in place and
//     never change its type except by an Avro promotion; add a new field
//     instead and stop writing the old one.
//  3. Update the Go payload struct to match the new version.
//  4. Run the tests: they check every version against all earlier ones
//     (CheckBackward), the envelope, the file names and the Go bindings.
//
// A codec only decodes versions it embeds, so deploy consumers before
// producers start writing a new version.
package schemas
