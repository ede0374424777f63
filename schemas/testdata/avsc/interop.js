// Reads Proliferate's single-object encoded records the way a non-Go
// consumer would: with the npm Avro library avsc and nothing but the .avsc
// files. Used by schemas/avsc_interop_test.go; nothing here shares code with
// the Go implementation.
//
// stdin:  {"schemaFiles": ["avro/x.v1.avsc", ...],   // paths of .avsc files
//          "schemas": ["<schema JSON>", ...],         // extra schemas to canonicalize
//          "records": ["<base64 record>", ...]}
// stdout: {"avsc": "<version>",
//          "schemaFiles": [{"file", "canonical", "rabin", "md5"}],
//          "schemas": [{"canonical", "rabin", "md5"} | {"error"}],
//          "records": [{"file", "fingerprint", "value"} | {"error"}]}
//
// canonical is avsc's Parsing Canonical Form (JSON.stringify(type.schema())),
// md5 is avsc's type.fingerprint() (MD5 of that form), and rabin is the
// CRC-64-AVRO of it as an unsigned decimal: Node's crypto has no CRC-64, so
// the few lines below implement the specification's algorithm and check it
// against the specification's known values before use. In decoded values
// longs are decimal strings (exact in 64 bits) and bytes are base64.
'use strict';

const fs = require('fs');
const path = require('path');
const avro = require('avsc');

const EMPTY = 0xc15d213aa4d7a795n;
const TABLE = [];
for (let i = 0; i < 256; i++) {
  let fp = BigInt(i);
  for (let j = 0; j < 8; j++) {
    fp = (fp >> 1n) ^ (EMPTY & -(fp & 1n));
  }
  TABLE.push(fp);
}

function rabin(text) {
  let fp = EMPTY;
  for (const b of Buffer.from(text, 'utf8')) {
    fp = (fp >> 8n) ^ TABLE[Number((fp ^ BigInt(b)) & 0xffn)];
  }
  return fp;
}

// Java's SchemaNormalization.parsingFingerprint64 of "int" and "long"
// (share/test/data/schema-tests.txt in apache/avro), as unsigned 64 bits.
for (const [text, want] of [['"int"', 8247732601305521295n], ['"long"', -3434872931120570953n]]) {
  if (rabin(text) !== BigInt.asUintN(64, want)) {
    throw new Error(`CRC-64-AVRO self-check failed for ${text}`);
  }
}

// Longs as BigInt, so that every 64-bit value decodes exactly (avsc's
// default long type refuses values beyond 2^53).
const bigLong = avro.types.LongType.__with({
  fromBuffer: (buf) => buf.readBigInt64LE(),
  toBuffer: (n) => {
    const buf = Buffer.alloc(8);
    buf.writeBigInt64LE(BigInt(n));
    return buf;
  },
  fromJSON: BigInt,
  toJSON: String,
  isValid: (n) => typeof n === 'bigint',
  compare: (a, b) => (a === b ? 0 : a < b ? -1 : 1),
});

function bigLongHook(schema) {
  if (schema === 'long' || (schema && schema.type === 'long')) {
    return bigLong;
  }
  return undefined;
}

function describe(schema) {
  const type = avro.Type.forSchema(schema);
  const canonical = JSON.stringify(type.schema());
  return {
    canonical,
    rabin: rabin(canonical).toString(),
    md5: type.fingerprint().toString('hex'),
  };
}

function toJSON(value) {
  return JSON.parse(JSON.stringify(value, function (key, v) {
    const raw = this[key];
    if (Buffer.isBuffer(raw)) {
      return raw.toString('base64');
    }
    if (typeof v === 'bigint') {
      return v.toString();
    }
    return v;
  }));
}

function main(input) {
  const out = {avsc: require('avsc/package.json').version, schemaFiles: [], schemas: [], records: []};
  const byFingerprint = new Map();
  for (const file of input.schemaFiles || []) {
    const schema = JSON.parse(fs.readFileSync(file, 'utf8'));
    const d = describe(schema);
    out.schemaFiles.push({file, ...d});
    if (byFingerprint.has(d.rabin)) {
      throw new Error(`${file} and ${byFingerprint.get(d.rabin).file} have the same fingerprint`);
    }
    byFingerprint.set(d.rabin, {
      file: path.basename(file),
      type: avro.Type.forSchema(schema, {typeHook: bigLongHook}),
    });
  }
  for (const text of input.schemas || []) {
    try {
      out.schemas.push(describe(JSON.parse(text)));
    } catch (err) {
      out.schemas.push({error: String(err.message || err)});
    }
  }
  for (const b64 of input.records || []) {
    try {
      const buf = Buffer.from(b64, 'base64');
      if (buf.length < 10 || buf[0] !== 0xc3 || buf[1] !== 0x01) {
        throw new Error('not single-object encoded');
      }
      const fp = buf.readBigUInt64LE(2).toString();
      const writer = byFingerprint.get(fp);
      if (!writer) {
        throw new Error(`no schema has fingerprint ${fp}`);
      }
      const value = writer.type.fromBuffer(buf.subarray(10));
      out.records.push({file: writer.file, fingerprint: fp, value: toJSON(value)});
    } catch (err) {
      out.records.push({error: String(err.message || err)});
    }
  }
  return out;
}

let stdin = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => { stdin += chunk; });
process.stdin.on('end', () => {
  process.stdout.write(JSON.stringify(main(JSON.parse(stdin))) + '\n');
});
